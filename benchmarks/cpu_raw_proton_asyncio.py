"""Raw python-qpid-proton receiving into asyncio: the asyncio face's process layout, by hand.

proton's reactor runs on a thread of its own (it has no asyncio integration), so an
asyncio program that receives with it hands each delivery to its loop and each accept
back to the container. This is the cheapest correct way a user would write that:

* the container thread keeps each delivery and hands the loop its number and body,
  waking the loop only when nothing was waiting already (``call_soon_threadsafe`` per
  message writes the loop's self-pipe each time). Proton objects never leave the
  container thread: proton is not thread-safe, and a wrapper released on the loop's
  thread frees C memory there (a first version handing over ``Delivery`` objects died
  in ``cproton_ffi`` with a general protection fault);
* the coroutine takes the run, "handles" each body and queues its number to accept,
  waking the container through an ``EventInjector`` only when the accept list was empty;
* the container accepts and settles a run per wake-up; credit is proton's
  ``MessagingHandler(prefetch=...)`` flow controller, as in the one-thread raw side.

Timed (two ``CLOCK.perf_counter()`` marks) from the first message to the moment the
last accept was settled on the container thread, connection set-up excluded, as the
ackbridge side is timed from its first delivery to its ``flush()``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from amqp10_bench import HOST, PORT
from cpu_clock import CLOCK
from proton import Delivery
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

ACCEPT_EVENT = "accept_these"


class _HandOff(MessagingHandler):  # type: ignore[misc]
    def __init__(self, address: str, count: int, prefetch: int, loop: asyncio.AbstractEventLoop,
                 arrived: asyncio.Event) -> None:
        super().__init__(prefetch=prefetch, auto_accept=False)
        self.address, self.count = address, count
        self.loop, self.arrived = loop, arrived
        self.injector = EventInjector()
        self.lock = threading.Lock()
        self.unsettled: dict[int, Any] = {}  # number -> Delivery, touched on the container thread only
        self.handed: list[tuple[int, bytes]] = []  # (number, body) received, not yet taken by the coroutine
        self.accepts: list[int] = []  # numbers handled by the coroutine, not yet accepted
        self.received = self.accepted = 0
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        event.container.selectable(self.injector)
        conn = event.container.connect(f"amqp://{HOST}:{PORT}", user="guest", password="guest",
                                       allowed_mechs="PLAIN", reconnect=False)
        self.receiver = event.container.create_receiver(conn, self.address)

    def on_message(self, event: Any) -> None:
        self.received += 1
        if self.received == 1:
            CLOCK.perf_counter()
        number = self.received
        self.unsettled[number] = event.delivery
        with self.lock:
            self.handed.append((number, event.message.body))
            first = len(self.handed) == 1
        if first:
            self.loop.call_soon_threadsafe(self.arrived.set)

    def accept(self, number: int) -> None:
        """From the loop's thread."""
        with self.lock:
            self.accepts.append(number)
            first = len(self.accepts) == 1
        if first:
            self.injector.trigger(ApplicationEvent(ACCEPT_EVENT))

    def on_accept_these(self, event: Any) -> None:
        with self.lock:
            run = self.accepts[:]
            self.accepts.clear()
        for number in run:
            delivery = self.unsettled.pop(number)
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
        self.accepted += len(run)
        if self.accepted == self.count:
            CLOCK.perf_counter()
            # Closing (not Container.stop()) writes the last dispositions before the socket goes.
            self.receiver.close()
            self.receiver.connection.close()
            self.injector.close()  # the container's run() returns once nothing is left open

    def take(self) -> list[tuple[int, bytes]]:
        with self.lock:
            run = self.handed[:]
            self.handed.clear()
        return run


async def receive(address: str, count: int, prefetch: int) -> None:
    """Drain *count* messages of *address*, each taken on the loop and accepted."""
    arrived = asyncio.Event()
    handler = _HandOff(address, count, prefetch, asyncio.get_running_loop(), arrived)
    container = Container(handler)
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    taken = 0
    while taken < count:
        await asyncio.wait_for(arrived.wait(), 60)
        arrived.clear()
        for number, body in handler.take():
            assert body  # the work: the body is read
            handler.accept(number)
            taken += 1
    await asyncio.to_thread(thread.join, 60)
    assert not thread.is_alive(), "the container did not stop"
