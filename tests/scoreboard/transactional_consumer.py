"""One life of a competing consumer process in the transactional grid: the inbox on the
application's database, SIGKILLing itself at a chosen point, or running until SIGTERM.

    python -m tests.scoreboard.transactional_consumer   (settings in the environment, below)

``ABTX_URL`` (the broker URL: kept out of argv and of every line printed), ``ABTX_OPTIONS``
(JSON connect options), ``ABTX_QUEUE``, ``ABTX_DB`` (JSON: kind, target, prefix), ``ABTX_KILL``
(``none`` | ``before_commit``: after the handler's write, inside the inbox's transaction |
``after_commit``: at the ack that follows a commit of new effects) and ``ABTX_AFTER`` (the kill
comes with the AFTER-th delivery whose handler ran in this life).

Lines on stdout: ``up`` once consuming, ``ran <id>`` / ``dup <id>`` once a delivery is settled,
``killing <point> <id>`` just before the SIGKILL. A ``none`` life stops on SIGTERM: it closes its
consumer (unsettled deliveries go back) and exits 0. The kill hooks are the crash tests' own
(``tests.transactional.consumer_app``): the process dies with a real SIGKILL, nothing is faked.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any

import ackbridge
from ackbridge.transactional import Inbox
from tests.transactional.appdb import AppDb
from tests.transactional.consumer_app import die, say

#: How long one get() waits before it looks at the stop flag again (a poll, not a wait for state).
POLL_S = 0.2


class _KillAtAck:
    """A delivery whose ack kills the process: the inbox's commit happened, the ack never leaves."""

    def __init__(self, delivery: Any) -> None:
        self._delivery = delivery

    def __getattr__(self, name: str) -> Any:
        return getattr(self._delivery, name)

    def ack(self) -> None:
        say(f"killing after_commit {self._delivery.message_id}")
        die()


def main() -> None:
    env = os.environ
    db_settings = json.loads(env["ABTX_DB"])
    app_db = AppDb(db_settings["kind"], db_settings["target"], db_settings["prefix"])
    kill, after = env["ABTX_KILL"], int(env["ABTX_AFTER"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox, create=False)  # the grid created it: no racing CREATE TABLE
    insert = app_db.insert_effect()
    ran = 0  # deliveries whose handler ran in this life

    def work(db_: Any, delivery: Any) -> None:
        nonlocal ran
        db_.execute(insert, (delivery.message_id, delivery.body.decode()))
        ran += 1
        if kill == "before_commit" and ran >= after:
            say(f"killing before_commit {delivery.message_id}")
            die()

    with ackbridge.connect(env["ABTX_URL"], **json.loads(env["ABTX_OPTIONS"])) as conn:
        consumer = conn.consume(env["ABTX_QUEUE"], prefetch=10)
        say("up")
        while not stop.is_set():
            delivery = consumer.get(timeout=POLL_S)
            if delivery is None:
                continue
            # Armed for a delivery that may reach AFTER: the kill happens only at the ack of a
            # delivery whose handler ran (a copy's ack follows no new commit: it is acked for real).
            armed = kill == "after_commit" and ran + 1 >= after
            done = inbox.handle(_ArmedWhenRun(delivery, lambda before=ran: ran > before) if armed else delivery,
                                work)
            say(f"{'ran' if done else 'dup'} {delivery.message_id}")
        consumer.close()
    db.close()


class _ArmedWhenRun(_KillAtAck):
    """Kill at the ack only when the handler ran for this delivery (its effects committed)."""

    def __init__(self, delivery: Any, ran: Any) -> None:
        super().__init__(delivery)
        self._ran = ran

    def ack(self) -> None:
        if self._ran():
            super().ack()
        self._delivery.ack()


if __name__ == "__main__":
    main()
