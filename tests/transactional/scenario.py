"""What the transactional tests publish and check: ids with copies the broker stores
twice (a retransmitted publish), and the effect table's and the broker's account."""

from __future__ import annotations

from typing import Any

import ackbridge
from ackbridge.testing import eventually
from tests.transactional.appdb import AppDb


def ids(count: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(count)]


def publish_with_copies(harness: Any, queue: str, names: list[str], copies: int) -> int:
    """Publish every id once, and each of the first *copies* ids a second time under the same id,
    as a retransmission the broker stored twice; the messages stored."""
    # Each copy right behind its original: copies meet both a committed id and one still being handled.
    order = [name for i, name in enumerate(names) for _ in range(2 if i < copies else 1)]
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        confirms = [conn.publish(queue, name.encode(), message_id=name) for name in order]
        assert all(confirm.result(30).confirmed for confirm in confirms)
    return len(confirms)


def work_for(app_db: AppDb) -> Any:
    """The application's handler: one row in the effect table per run."""
    insert = app_db.insert_effect()

    def work(db: Any, delivery: Any) -> None:
        db.execute(insert, (delivery.message_id, delivery.body.decode()))
    return work


def assert_exactly_once(app_db: AppDb, names: list[str]) -> None:
    """Every id's effect exactly once: nothing LOST, nothing doubled."""
    counts = app_db.effect_counts()
    lost = sorted(set(names) - set(counts))
    doubled = {name: n for name, n in counts.items() if n != 1}
    assert not lost, f"LOST {len(lost)}: {lost[:10]}"
    assert not doubled, f"effects applied more than once: {doubled}"
    assert sorted(counts) == sorted(names)


def assert_queue_empty(harness: Any, queue: str) -> None:
    """What the broker holds: nothing ready, nothing unacked."""
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 0), timeout=30,
               message=f"{queue} empty on the broker")
