"""The settlement state machine, without any broker: properties that must always hold."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackbridge.capabilities import Capabilities, Verb, emulated, native
from ackbridge.errors import AlreadySettledError, StaleDeliveryError
from ackbridge.kernel.settlement import Ledger, State
from ackbridge.messages import InboundMessage, WireSettle, WireVerb


def caps(*, multiple: bool = True, ordered: bool = False) -> Capabilities:
    verbs = {v: native() for v in Verb}
    if not multiple:
        verbs[Verb.CUMULATIVE_ACK] = emulated("one by one")
    return Capabilities("test", verbs, ordered_acks=ordered)


def msg(tag: int, generation: int = 1) -> InboundMessage:
    return InboundMessage(wire_tag=tag, generation=generation, body=b"", source="q")


def replay(ops: list[WireSettle], delivered: list[int]) -> dict[int, WireVerb]:
    """What the broker would end up with after *ops* (AMQP multiple semantics)."""
    outstanding = list(delivered)
    settled: dict[int, WireVerb] = {}
    for op in ops:
        tag = int(op.wire_tag)  # type: ignore[call-overload]
        assert tag in outstanding, f"op on tag {tag} not outstanding: broker would close the channel"
        covered = [t for t in outstanding if t <= tag] if op.multiple else [tag]
        for t in covered:
            settled[t] = op.verb
            outstanding.remove(t)
    return settled


actions = st.lists(st.tuples(st.integers(0, 19), st.sampled_from(["ack", "requeue", "reject", "through"])),
                   max_size=60)


@settings(max_examples=300, deadline=None)
@given(actions=actions, count=st.integers(1, 10), multiple=st.booleans(), ordered=st.booleans())
def test_every_decision_reaches_the_wire_once_and_exactly(actions: list[tuple[int, str]], count: int,
                                                          multiple: bool, ordered: bool) -> None:
    ledger = Ledger("s", caps(multiple=multiple, ordered=ordered), conflate_count=count)
    records = [ledger.admit(msg(tag)) for tag in range(1, 21)]
    ops: list[WireSettle] = []
    for index, verb in actions:
        record = records[index]
        assert record is not None
        try:
            if verb == "through":
                ops += ledger.ack_through(record)
            else:
                ops += ledger.settle(record, WireVerb(verb))
        except AlreadySettledError:
            assert record.state is not State.PENDING
    ops += ledger.flush()
    broker = replay(ops, list(range(1, 21)))
    decided = {r.message.wire_tag: r.state for r in records if r is not None and r.state is not State.PENDING}
    expected = {State.ACKED: WireVerb.ACK, State.REQUEUED: WireVerb.REQUEUE, State.REJECTED: WireVerb.REJECT}
    if ordered:
        # Only the decided prefix in receive order may be on the wire.
        prefix = []
        for r in records:
            assert r is not None
            if r.state is State.PENDING:
                break
            prefix.append(r.message.wire_tag)
        assert [int(op.wire_tag) for op in ops] == prefix  # type: ignore[call-overload]
        assert all(not op.multiple for op in ops)
    else:
        assert broker == {tag: expected[state] for tag, state in decided.items()}
    if not multiple:
        assert all(not op.multiple for op in ops)


def test_conflated_acks_flush_on_count_with_one_multiple_ack() -> None:
    ledger = Ledger("s", caps(), conflate_count=3)
    records = [ledger.admit(msg(t)) for t in (1, 2, 3)]
    assert ledger.settle(records[0], WireVerb.ACK) == []  # type: ignore[arg-type]
    assert ledger.settle(records[1], WireVerb.ACK) == []  # type: ignore[arg-type]
    ops = ledger.settle(records[2], WireVerb.ACK)  # type: ignore[arg-type]
    assert [(op.wire_tag, op.multiple) for op in ops] == [(3, True)]


def test_pending_gap_stops_the_multiple_ack() -> None:
    ledger = Ledger("s", caps(), conflate_count=100)
    r1, r2, r3 = (ledger.admit(msg(t)) for t in (1, 2, 3))
    ledger.settle(r1, WireVerb.ACK)  # type: ignore[arg-type]
    ledger.settle(r3, WireVerb.ACK)  # type: ignore[arg-type]
    ops = ledger.flush()
    assert [(op.wire_tag, op.multiple) for op in ops] == [(1, False), (3, False)]
    assert r2 is not None and r2.state is State.PENDING


def test_time_flush_uses_the_clock() -> None:
    now = [100.0]
    ledger = Ledger("s", caps(), conflate_count=100, conflate_ms=50, clock=lambda: now[0])
    record = ledger.admit(msg(1))
    assert ledger.settle(record, WireVerb.ACK) == []  # type: ignore[arg-type]
    assert ledger.deadline() == pytest.approx(100.05)
    assert ledger.due() == []
    now[0] = 100.06
    assert [op.wire_tag for op in ledger.due()] == [1]


def test_new_generation_makes_old_records_stale_and_drops_their_acks() -> None:
    ledger = Ledger("s", caps(), conflate_count=10)
    old = ledger.admit(msg(1, generation=1))
    buffered = ledger.admit(msg(2, generation=1))
    ledger.settle(buffered, WireVerb.ACK)  # type: ignore[arg-type]
    ledger.generation_ended(1)
    fresh = ledger.admit(msg(1, generation=2))  # same tag, different message
    with pytest.raises(StaleDeliveryError):
        ledger.settle(old, WireVerb.ACK)  # type: ignore[arg-type]
    assert old is not None and old.state is State.PENDING
    assert ledger.flush() == []  # the buffered ack of generation 1 is never sent
    assert [op.generation for op in ledger.settle(fresh, WireVerb.REQUEUE)] == [2]  # type: ignore[arg-type]
    assert ledger.admit(msg(9, generation=1)) is None


def test_ordered_acks_are_conflated_and_released_in_order() -> None:
    ledger = Ledger("s", caps(multiple=False, ordered=True), conflate_count=3)
    r1, r2, r3 = (ledger.admit(msg(t)) for t in (1, 2, 3))
    assert ledger.settle(r2, WireVerb.ACK) == []  # type: ignore[arg-type]
    assert ledger.settle(r1, WireVerb.ACK) == []  # type: ignore[arg-type]
    ops = ledger.settle(r3, WireVerb.ACK)  # type: ignore[arg-type]
    assert [op.wire_tag for op in ops] == [1, 2, 3]


def test_ending_another_generation_leaves_this_ledger_alone() -> None:
    ledger = Ledger("s", caps())
    record = ledger.admit(msg(1, generation=4))
    ledger.generation_ended(3)
    ledger.generation_ended(5)
    assert [op.wire_tag for op in ledger.settle(record, WireVerb.ACK)] == [1]  # type: ignore[arg-type]


def test_receive_dead_letters_poison_and_flags_new_generations() -> None:
    ledger = Ledger("s", caps(), max_deliveries=2)
    fine = InboundMessage(wire_tag=1, generation=1, body=b"", source="q", delivery_count=2)
    poison = InboundMessage(wire_tag=2, generation=1, body=b"", source="q", delivery_count=3)
    first = ledger.receive(fine)
    assert first.record is not None and first.reject == [] and first.new_generation
    second = ledger.receive(poison)
    assert second.record is None and not second.new_generation
    assert [(op.verb, op.wire_tag) for op in second.reject] == [(WireVerb.REJECT, 2)]
    assert ledger.dead_lettered_by_policy == 1
    assert ledger.receive(InboundMessage(wire_tag=1, generation=2, body=b"", source="q")).new_generation
    assert ledger.receive(InboundMessage(wire_tag=9, generation=1, body=b"", source="q")).record is None
