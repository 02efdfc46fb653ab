"""The attempt count of a guaranteed publish (``guaranteed.decide``): a send counts
when it went on the wire; a try during an outage (``unsent``) does not, so an outage
is bounded by ``retransmit_deadline`` and never uses up ``max_attempts``."""

from __future__ import annotations

from ackbridge.kernel.guaranteed import Attempts, decide
from ackbridge.messages import CONFIRMED, ConfirmStatus, OutboundMessage, refused, unknown, unsent


def _attempts(give_up_at: float = 100.0) -> Attempts:
    return Attempts("q", OutboundMessage(body=b"x"), give_up_at)


def test_tries_during_an_outage_are_not_attempts() -> None:
    attempts = _attempts()
    for _ in range(1000):
        assert decide(attempts, unsent("not sent: the connection is down"), 1.0, max_attempts=1) is None
    final = decide(attempts, CONFIRMED, 2.0, max_attempts=1)
    assert final is not None and final.status is ConfirmStatus.CONFIRMED and final.attempts == 1


def test_sends_answered_unknown_use_up_max_attempts() -> None:
    attempts = _attempts()
    assert decide(attempts, unknown("no answer"), 1.0, max_attempts=2) is None
    assert decide(attempts, unsent("not sent"), 1.0, max_attempts=2) is None
    final = decide(attempts, unknown("no answer"), 1.0, max_attempts=2)
    assert final is not None and final.status is ConfirmStatus.UNKNOWN and final.attempts == 2
    assert "gave up after 2 attempts" in final.reason


def test_an_outage_ends_at_the_deadline_with_the_sends_it_made() -> None:
    attempts = _attempts(give_up_at=10.0)
    assert decide(attempts, unsent("not sent"), 5.0, max_attempts=5) is None
    final = decide(attempts, unsent("not sent"), 10.0, max_attempts=5)
    assert final is not None and final.status is ConfirmStatus.UNKNOWN and final.attempts == 0
    assert "retransmit_deadline passed after 0 attempts" in final.reason


def test_refused_is_final_at_once() -> None:
    final = decide(_attempts(), refused("unroutable"), 1.0, max_attempts=5)
    assert final is not None and final.status is ConfirmStatus.REFUSED and final.attempts == 1
