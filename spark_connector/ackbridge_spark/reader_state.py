"""What every stream reader of the connector does when Spark pickles it."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

Options = TypeVar("Options")


class OptionsOnlyPickle(Generic[Options]):
    """The planner's copy of a reader is pickled to the executors: it carries the
    options only, never a connection, a runner or a reader process; unpickled, it
    starts afresh through ``_reset_runtime``."""

    _opts: Options

    def __getstate__(self) -> dict[str, Any]:
        return {"_opts": self._opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._opts = state["_opts"]
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        """Set the reader's runtime state to "nothing started yet"."""
        raise NotImplementedError
