"""Deliveries and confirms handed to the core once per reactor pass (bursts.py), no broker needed.

What must hold: nothing is handed over twice or lost, the order of each stream
is kept, an event that ends a generation (or a reply, or a failure) never
overtakes a delivery or confirm reported before it, and a confirm reported
from another thread (a publish refused on the publishing thread) goes through
at once, since the container thread would never hand it over.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ackbridge.errors import ConnectionLostError
from ackbridge.messages import CONFIRMED, ConfirmOutcome, InboundMessage, refused
from ackbridge_amqp10.bursts import BurstEvents


class Recorder:
    """TransportEvents that record what reached the core, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        self.seen.append(("deliver", subscription, message.wire_tag))

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        self.seen.append(("confirm", seq))

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        self.seen.append(("confirm_batch", [seq for seq, _ in outcomes]))

    def generation_ended(self, generation: int, reason: str) -> None:
        self.seen.append(("generation_ended", generation))

    def reply(self, message: InboundMessage) -> None:
        self.seen.append(("reply", message.wire_tag))

    def failed(self, error: Any, subscription: str | None = None) -> None:
        self.seen.append(("failed", subscription))


def _message(tag: int) -> InboundMessage:
    return InboundMessage(body=b"x", wire_tag=tag, generation=1, source="/queue/q")


def _burst() -> tuple[BurstEvents, Recorder]:
    recorder = Recorder()
    burst = BurstEvents(recorder)
    burst.thread_id = threading.get_ident()  # this test plays the container thread
    return burst, recorder


def test_held_until_the_pass_ends_then_handed_over_in_order_once() -> None:
    burst, core = _burst()
    for tag in (1, 2, 3):
        burst.deliver("s", _message(tag))
    burst.confirm(10, CONFIRMED)
    burst.confirm(11, CONFIRMED)
    assert core.seen == []
    burst.flush()
    assert core.seen == [("deliver", "s", 1), ("deliver", "s", 2), ("deliver", "s", 3), ("confirm_batch", [10, 11])]
    burst.flush()  # nothing twice
    assert len(core.seen) == 4


def test_a_single_confirm_goes_as_one() -> None:
    burst, core = _burst()
    burst.confirm(7, CONFIRMED)
    burst.flush()
    assert core.seen == [("confirm", 7)]


def test_a_generation_end_never_overtakes_what_was_reported_before_it() -> None:
    burst, core = _burst()
    burst.deliver("s", _message(1))
    burst.confirm_batch([(5, CONFIRMED), (6, refused("no"))])
    burst.generation_ended(1, "lost")
    assert core.seen == [("deliver", "s", 1), ("confirm_batch", [5, 6]), ("generation_ended", 1)]


def test_replies_and_failures_hand_over_what_is_held_first() -> None:
    burst, core = _burst()
    burst.deliver("s", _message(1))
    burst.reply(_message(9))
    burst.deliver("s", _message(2))
    burst.failed(ConnectionLostError("gone"), "s")
    assert core.seen == [("deliver", "s", 1), ("reply", 9), ("deliver", "s", 2), ("failed", "s")]


def test_a_confirm_from_another_thread_goes_through_at_once() -> None:
    burst, core = _burst()
    burst.deliver("s", _message(1))

    def publishing_thread() -> None:
        burst.confirm(3, refused("not sent: bad address"))
        burst.confirm_batch([(4, refused("x"))])
        burst.generation_ended(2, "elsewhere")  # never touches what the container holds

    thread = threading.Thread(target=publishing_thread)
    thread.start()
    thread.join()
    assert core.seen == [("confirm", 3), ("confirm_batch", [4]), ("generation_ended", 2)]
    burst.flush()
    assert core.seen[-1] == ("deliver", "s", 1)


def test_an_event_reported_while_handing_over_is_not_lost() -> None:
    """The core may report back from inside a delivery (an ack settled on the
    container thread); a delivery held meanwhile goes out on the next flush."""
    core = Recorder()
    burst = BurstEvents(core)
    burst.thread_id = threading.get_ident()

    def deliver(subscription: str, message: InboundMessage) -> None:
        core.seen.append(("deliver", subscription, message.wire_tag))
        if message.wire_tag == 1:
            burst.deliver("s", _message(99))

    core.deliver = deliver  # type: ignore[method-assign]
    burst.deliver("s", _message(1))
    burst.deliver("s", _message(2))
    burst.flush()
    burst.flush()
    assert core.seen == [("deliver", "s", 1), ("deliver", "s", 2), ("deliver", "s", 99)]


def test_the_container_thread_hands_over_what_it_holds_when_its_loop_ends() -> None:
    """A stop ends proton's loop without a last quiesced pass (bursts.py): the
    container thread's ``last`` hook hands over what it still holds."""
    from proton.handlers import MessagingHandler

    from ackbridge_amqp10.container import ContainerThread

    core = Recorder()
    burst = BurstEvents(core)

    class Work(MessagingHandler):  # type: ignore[misc]
        def on_ackbridge_work(self, event: Any) -> None:
            thread.run_work()

    thread = ContainerThread(Work(), what="test", timeout=5.0, recover=lambda _w: None, scrub=str,
                             last=burst.flush)
    thread.start()
    burst.thread_id = thread.ident
    thread.stop(lambda: burst.confirm(1, CONFIRMED))  # held on the container thread, then the loop ends
    assert core.seen == [("confirm", 1)]
