"""Link credit on the receive side (no broker needed).

RabbitMQ 3.x now and then sends more transfers than the credit granted
(rabbitmq-server#2597). proton then holds a negative credit and writes it on the
next flow frame as an unsigned number, about 4 billion: the broker may send the
whole queue. These tests pin the rule that keeps credit from ever going out below
zero and keeps what the receiver holds plus its credit at the prefetch.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ackbridge_amqp10.receiving import credit_to_grant

prefetches = st.integers(min_value=1, max_value=2000)


@given(prefetches, st.integers(min_value=0, max_value=4000), st.integers(min_value=-500, max_value=2000))
def test_grant_never_leaves_credit_below_zero_nor_above_the_prefetch(prefetch: int, held: int, credit: int) -> None:
    grant = credit_to_grant(prefetch, held, credit)
    assert grant >= 0
    if credit < 0:
        assert credit + grant >= 0  # the over-delivery is cancelled at once
    if grant and held <= prefetch:
        assert held + credit + grant == prefetch  # topped up to the prefetch, never past it
    if grant and held > prefetch:
        assert credit + grant == 0  # over the prefetch: only the over-delivery is cancelled


def test_credit_is_batched_while_plenty_is_left() -> None:
    assert credit_to_grant(100, 10, 80) == 0  # 10 owed, 80 left: no flow frame yet
    assert credit_to_grant(100, 10, 50) == 40  # down to half: top up
    assert credit_to_grant(100, 0, 0) == 100


@given(prefetches, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5), st.integers(0, 40)), max_size=60))
def test_an_over_delivering_broker_stays_bounded(prefetch: int, rounds: list[tuple[int, int, int]]) -> None:
    """Simulate a broker that sends up to its credit plus a few more, a receiver
    that settles some of what it holds, and the grant rule in between: the credit
    on the wire is never negative, and nothing runs away."""
    wire_credit = prefetch  # what the broker believes it may send
    credit = prefetch  # the receiver's count (proton's)
    held = 0
    worst = 0
    for sent_in_credit, extra, settled in rounds:
        sent = min(sent_in_credit, wire_credit) + extra
        wire_credit = max(wire_credit - sent, 0)
        held += sent
        credit -= sent
        if credit < 0:  # what the transport does on the delivery that went over
            wire_credit = 0
            credit = 0
        worst = max(worst, held)
        held -= min(settled, held)
        grant = credit_to_grant(prefetch, held, credit)
        credit += grant
        wire_credit = credit
        assert 0 <= wire_credit <= prefetch
        assert held + credit <= max(prefetch, held)
    # Each round can overshoot by its extra only: held never exceeds prefetch + extras.
    assert worst <= prefetch + sum(extra for _, extra, _ in rounds)
