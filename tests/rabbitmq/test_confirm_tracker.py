"""ConfirmTracker: delivery tags of a confirm channel onto the core's seqs (pure)."""

from __future__ import annotations

from ackbridge.messages import ConfirmStatus
from ackbridge_rabbitmq.confirms import ConfirmTracker


def statuses(outcomes: list) -> list[tuple[int, str]]:
    return [(seq, outcome.status.value) for seq, outcome in outcomes]


def test_multiple_ack_settles_everything_up_to_the_tag_in_order() -> None:
    t = ConfirmTracker()
    for seq in (10, 11, 12, 13):
        t.sent(seq, f"id-{seq}")
    assert statuses(t.answered(3, True, True)) == [(10, "confirmed"), (11, "confirmed"), (12, "confirmed")]
    assert statuses(t.answered(3, True, True)) == []  # never twice
    assert len(t) == 1
    assert statuses(t.answered(4, False, False)) == [(13, "refused")]
    assert len(t) == 0


def test_single_ack_out_of_order() -> None:
    t = ConfirmTracker()
    for seq in (1, 2, 3):
        t.sent(seq, f"id-{seq}")
    assert statuses(t.answered(2, False, True)) == [(2, "confirmed")]
    assert statuses(t.answered(3, True, True)) == [(1, "confirmed"), (3, "confirmed")]


def test_return_turns_the_following_ack_into_a_refusal_of_that_message_only() -> None:
    t = ConfirmTracker()
    for seq in (1, 2, 3):
        t.sent(seq, f"id-{seq}")
    t.returned("id-2", "unroutable: 312 NO_ROUTE")
    out = t.answered(3, True, True)
    assert statuses(out) == [(1, "confirmed"), (2, "refused"), (3, "confirmed")]
    assert out[1][1].reason == "unroutable: 312 NO_ROUTE"


def test_returns_of_a_repeated_message_id_go_to_the_oldest_not_yet_returned() -> None:
    t = ConfirmTracker()
    for seq in (1, 2, 3):
        t.sent(seq, "same")
    t.returned("same", "first")
    t.returned("same", "second")
    out = t.answered(3, True, True)
    assert [(seq, o.status, o.reason) for seq, o in out] == [
        (1, ConfirmStatus.REFUSED, "first"), (2, ConfirmStatus.REFUSED, "second"), (3, ConfirmStatus.CONFIRMED, "")]


def test_unknown_return_and_unknown_tag_change_nothing() -> None:
    t = ConfirmTracker()
    t.sent(1, "a")
    t.returned("nobody", "x")
    t.returned(None, "x")
    assert statuses(t.answered(7, False, True)) == []
    assert statuses(t.answered(1, False, True)) == [(1, "confirmed")]


def test_lose_all_reports_every_pending_one_unknown_once() -> None:
    t = ConfirmTracker()
    for seq in (5, 6):
        t.sent(seq, f"id-{seq}")
    t.returned("id-5", "unroutable")
    assert statuses(t.lose_all("gone")) == [(5, "unknown"), (6, "unknown")]
    assert t.lose_all("gone") == []
    assert statuses(t.answered(2, True, True)) == []
