"""What the broker's answers to a publisher do: a PublishConfirm frame confirms its own
publisher's publishes (publishing ids are per publisher, so another publisher's equal ids are
left alone) in one batch, a PublishError frame refuses them, an id nobody waits for changes
nothing, and a lost connection leaves every publish still waiting unknown. Runs the
publishers' bookkeeping against frames built by hand (no broker)."""

from __future__ import annotations

from typing import Any

from rstream import schema

from ackbridge.messages import ConfirmOutcome, ConfirmStatus
from ackbridge_rabbitmq_streams.sending import StreamPublishers


def _publishers() -> tuple[StreamPublishers, list[tuple[int, ConfirmOutcome]], list[list[tuple[int, ConfirmOutcome]]]]:
    singles: list[tuple[int, ConfirmOutcome]] = []
    batches: list[list[tuple[int, ConfirmOutcome]]] = []

    def spawn(coro: Any) -> None:
        coro.close()

    publishers = StreamPublishers(lambda seq, outcome: singles.append((seq, outcome)),
                                  lambda outcomes: batches.append(list(outcomes)), None, 1 << 20, spawn, fast=True)
    return publishers, singles, batches


def _sent(publishers: StreamPublishers, publisher_id: int, stream: str, seqs: list[int]) -> None:
    """Number *seqs* as the sender does (publishing ids 1, 2 ... of *publisher_id*)."""
    publishers._next_id[publisher_id] = 1
    pending = publishers._pending.setdefault(publisher_id, {})
    batch: list[schema.Message] = []
    for seq in seqs:
        publishers._number(batch, pending, publisher_id, seq, stream, b"x", None)
    assert [m.publishing_id for m in batch] == list(range(1, len(seqs) + 1))


def test_a_confirm_frame_answers_its_own_publishers_publishes_in_one_batch() -> None:
    publishers, singles, batches = _publishers()
    _sent(publishers, 0, "a", [1, 2, 3])
    _sent(publishers, 1, "b", [11, 12, 13])  # the same publishing ids 1-3, another publisher
    publishers._on_confirm(schema.PublishConfirm(publisher_id=1, publishing_ids=[1, 2, 99]))
    assert [[(seq, o.status) for seq, o in batch] for batch in batches] == [
        [(11, ConfirmStatus.CONFIRMED), (12, ConfirmStatus.CONFIRMED)]]
    publishers._on_confirm(schema.PublishConfirm(publisher_id=1, publishing_ids=[1]))  # answered already
    publishers._on_confirm(schema.PublishConfirm(publisher_id=7, publishing_ids=[1]))  # no such publisher
    assert len(batches) == 1
    assert publishers.pending == 4 and singles == []


def test_an_error_frame_refuses_and_a_loss_leaves_the_rest_unknown() -> None:
    publishers, singles, batches = _publishers()
    _sent(publishers, 0, "a", [1, 2, 3])
    publishers._on_error(schema.PublishError(publisher_id=0, errors=[
        schema.PublishingError(publishing_id=2, response_code=18)]))
    assert [(seq, o.status) for seq, o in batches[0]] == [(2, ConfirmStatus.REFUSED)]
    assert "code 18" in batches[0][0][1].reason
    publishers.lost("cut")
    assert [(seq, o.status) for seq, o in singles] == [(1, ConfirmStatus.UNKNOWN), (3, ConfirmStatus.UNKNOWN)]
    assert publishers.pending == 0
