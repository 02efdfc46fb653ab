"""The connector's fault seam: test-only faults, declared apart from the user's options.

Fault tests (``tests/spark``, the scoreboard) cut a source's or a sink task's
broker connection, or fail a sink task, at a chosen point of a real query.
They ask for it in the query's own option map, with options whose names
start with ``test`` -- the prefix says "this is a test":

* ``testSeverAfterBatches=N`` (driver-side source): sever the reader's broker
  connection when it has planned its N-th batch;
* ``testSeverAfterRows=N`` (sink, first attempt of each task): sever the
  task's connection after N rows were published;
* ``testFailAfterRows=N`` (sink, first attempt of each task): fail the task
  after N rows were published and confirmed.

They are parsed from the same map by their own :data:`FAULT_OPTIONS`, but are
none of the connector's documented options
(:data:`ackbridge_spark.options.OWN_OPTIONS`): the user-facing validation
neither lists nor suggests them, and they never reach the broker plugin. An
unknown ``test...`` option fails here, naming only the seam's own options.
The executor-side sources have no fault seam and refuse them
(:func:`refuse_faults`).

A fault is injected through the transport's own fault seam
(``sever`` on :class:`ackbridge.transport.TransportBase`; a transport that
wraps another forwards it, :class:`ackbridge.transport.ForwardedFaults`).
A transport that cannot sever itself raises NotImplementedError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ackbridge.errors import InvalidOptionError
from ackbridge.options import OptionSpec, resolve_options

if TYPE_CHECKING:
    from ackbridge import Connection

#: What marks an option as a fault of this seam (Spark hands option names lower case).
FAULT_PREFIX = "test"


def _off_or_count(value: int) -> bool:
    return value >= 0


FAULT_OPTIONS = (
    OptionSpec("testSeverAfterBatches", int, 0, "source: sever the broker connection after planning batch N",
               _off_or_count, "must be >= 0 (0: off)", secret=True),
    OptionSpec("testSeverAfterRows", int, 0, "sink: sever a task's connection after N published rows",
               _off_or_count, "must be >= 0 (0: off)", secret=True),
    OptionSpec("testFailAfterRows", int, 0, "sink: fail a task after N published and confirmed rows",
               _off_or_count, "must be >= 0 (0: off)", secret=True),
)
_BY_LOWER = {spec.name.lower(): spec.name for spec in FAULT_OPTIONS}


@dataclass(frozen=True)
class Faults:
    """The faults a query asked for (0: off)."""

    sever_after_batches: int = 0
    #: Sink faults act on the first attempt of each task only (the retry succeeds).
    sever_after_rows: int = 0
    fail_after_rows: int = 0


NO_FAULTS = Faults()


def is_fault_option(key: str) -> bool:
    """Whether option *key* belongs to the fault seam (by its prefix)."""
    return key.lower().startswith(FAULT_PREFIX)


def _given(options: Mapping[str, str]) -> dict[str, str]:
    """The fault options of *options*, by their documented spelling (unknown ones refused)."""
    named: dict[str, str] = {}
    for key, value in options.items():
        if not is_fault_option(key):
            continue
        name = _BY_LOWER.get(key.lower())
        if name is None:
            raise InvalidOptionError(
                f"the ackbridge fault seam has no option {key!r} (options named 'test...' are test-only faults: "
                f"{', '.join(_BY_LOWER.values())})")
        if str(value).strip():
            named[name] = str(value).strip()
    return named


def parse_faults(options: Mapping[str, str]) -> Faults:
    """The faults asked for in *options* (a Spark option map: any case)."""
    named = _given(options)
    if not named:
        return NO_FAULTS
    resolved = resolve_options(FAULT_OPTIONS, named, owner="the ackbridge fault seam")
    return Faults(sever_after_batches=resolved["testSeverAfterBatches"],
                  sever_after_rows=resolved["testSeverAfterRows"],
                  fail_after_rows=resolved["testFailAfterRows"])


def refuse_faults(options: Mapping[str, str], source: str) -> None:
    """Raise if *options* ask a *source* without a fault seam for a fault."""
    for name in _given(options):
        raise InvalidOptionError(f"ackbridge option {name!r} does not apply to {source}: the fault seam "
                                 "is the driver-side source's and the sink's")


def refuse_source_faults(options: Mapping[str, str], source: str) -> None:
    """Raise if *options* ask *source* (not the driver-side one) for the source's fault."""
    if "testSeverAfterBatches" in _given(options):
        raise InvalidOptionError(f"ackbridge option 'testSeverAfterBatches' does not apply to {source}: "
                                 "a driver-side fault seam")


def sever(conn: Connection, reason: str) -> None:
    """Cut *conn* as a network fault would (its generation ends); NotImplementedError
    where its transport cannot."""
    from ackbridge.transport.faults import faults

    faults(conn).sever(reason)


class InjectedTaskFailure(RuntimeError):
    """Raised by the ``testFailAfterRows`` fault (tests only)."""
