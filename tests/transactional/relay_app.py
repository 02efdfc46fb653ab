"""A relay process for the crash test: publishes the outbox, and kills itself
(SIGKILL) right after the broker confirmed its KILL_AT-th publish -- before the
relay removed that round's rows.

    python -m tests.transactional.relay_app URL QUEUE_TYPE DB_KIND DB_TARGET PREFIX KILL_AT
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import ackbridge
from ackbridge.transactional import Relay
from tests.transactional.appdb import AppDb


def die() -> None:
    print("killing", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class KillAfterConfirms:
    """An ackbridge connection whose publisher's confirms run *action* (default: kill the
    process) once *kill_at* of them said confirmed (0: never); once."""

    def __init__(self, connection: Any, kill_at: int, action: Callable[[], None] = die) -> None:
        self._connection = connection
        self.kill_at = kill_at
        self.action = action
        self.confirmed = 0

    def publisher(self, **options: Any) -> Any:
        return _Publisher(self, self._connection.publisher(**options))


class _Publisher:
    def __init__(self, owner: KillAfterConfirms, publisher: Any) -> None:
        self._owner, self._publisher = owner, publisher

    def publish(self, destination: str, body: bytes, **options: Any) -> Any:
        return _Confirm(self._owner, self._publisher.publish(destination, body, **options))


class _Confirm:
    def __init__(self, owner: KillAfterConfirms, confirm: Any) -> None:
        self._owner, self._confirm = owner, confirm

    def result(self, timeout: float | None = None) -> Any:
        outcome = self._confirm.result(timeout)
        if outcome.confirmed:
            self._owner.confirmed += 1
            if self._owner.kill_at and self._owner.confirmed == self._owner.kill_at:
                self._owner.action()
        return outcome


def main() -> None:
    url, queue_type, db_kind, target, prefix, kill_at = sys.argv[1:7]
    app_db = AppDb(db_kind, target, prefix)
    options = {"queue_type": queue_type} if queue_type != "-" else {}
    db = app_db.connect()
    with ackbridge.connect(url, **options) as conn:
        relay = Relay(db, KillAfterConfirms(conn, int(kill_at)), table=app_db.outbox, batch=10)
        totals = relay.run(idle_exit=1.0)
        print(f"confirmed {totals.confirmed} refused {totals.refused} unknown {totals.unknown}", flush=True)
    db.close()


if __name__ == "__main__":
    main()
