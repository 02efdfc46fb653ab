"""The open broker file as the transport's parts share it, and how they meet its errors.

:class:`BrokerFile` holds the :class:`~ackbridge_local.store.Store` while the
connection is open, the damage found in it (once: every later call raises it)
and whether the connection is closing. The background threads (polling,
reply inbox, group commit, heartbeat) get this, not the transport.

None of them ends on an error unreported (:class:`Trouble`). A damaged file
ends the connection (:meth:`BrokerFile.fail`: logged, every later call raises
it). A storage error that may pass (disk full) is logged and retried with a
growing pause; the thread carries on when space returns. Anything unexpected
is logged with its traceback and ends the generation, as a cut connection
would, and the thread carries on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from ackbridge.errors import AckbridgeError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge_local.errors import DamagedFileError
from ackbridge_local.store import Store

log = logging.getLogger("ackbridge.local")

_MAX_PAUSE = 1.0


class BrokerFile:
    """The store (while open), the damage found in it, and the closing flag."""

    def __init__(self, path: str, on_fail: Callable[[DamagedFileError], None]) -> None:
        self.path = path
        self._store: Store | None = None
        self.failure: DamagedFileError | None = None
        self.closing = threading.Event()
        self._on_fail = on_fail
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None:
            raise ConnectionLostError(f"the embedded broker file {self.path!r} is not open")
        return self._store

    @property
    def is_open(self) -> bool:
        return self._store is not None

    @property
    def usable(self) -> bool:
        """Open, not closing and not damaged: worth a thread's next attempt."""
        return self._store is not None and not self.closing.is_set() and self.failure is None

    def opened(self, store: Store) -> None:
        self._store = store

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def fail(self, exc: DamagedFileError) -> None:
        """The file is damaged, deleted or replaced: report it once and make every later
        call raise it; the transport's *on_fail* stops what uses the file."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = exc
        log.error("ackbridge embedded broker: %s", exc)
        self._on_fail(exc)

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure

    @contextlib.contextmanager
    def checked(self) -> Iterator[Store]:
        """The store, for one call; damage found during it ends this connection."""
        self.raise_if_failed()
        try:
            yield self.store
        except DamagedFileError as exc:
            self.fail(exc)
            raise


class Trouble:
    """What one thread does after an error: damage ends the connection; anything
    else is logged (once per streak) and retried after a growing pause."""

    def __init__(self, file: BrokerFile, what: str, end_generation: Callable[[str], None]) -> None:
        self.file = file
        self.what = what
        self._end_generation = end_generation
        # Retrying storage is reconnecting to the file: the core's one back-off.
        self.backoff = Backoff(max_delay=_MAX_PAUSE, initial=0.01)
        self.streak = 0

    def ok(self) -> None:
        if self.streak:
            log.warning("ackbridge embedded broker %s: %s works again after %d failed attempt(s)",
                        self.file.path, self.what, self.streak)
        self.backoff.reset()
        self.streak = 0

    def failed(self, exc: BaseException) -> float | None:
        """The pause before the next attempt, or None when the thread is to stop (damage)."""
        if isinstance(exc, DamagedFileError):
            self.file.fail(exc)
            return None
        if isinstance(exc, ConnectionLostError):
            return None  # closed under us: close() is ending this thread
        self.streak += 1
        if self.streak == 1:
            if isinstance(exc, AckbridgeError):
                log.warning("ackbridge embedded broker %s: %s failed, retrying: %s", self.file.path, self.what,
                            exc)
            else:
                log.error("ackbridge embedded broker %s: %s failed unexpectedly; ending the generation",
                          self.file.path, self.what, exc_info=exc)
        if not isinstance(exc, AckbridgeError):
            self._end_generation(f"{self.what} failed: {type(exc).__name__}: {exc}")
        return self.backoff.next_delay()
