"""Queue declaration, deletion, purge and inspection, each on a short-lived channel.

A broker error (404, 406...) closes the channel it happened on; running each
operation on a channel of its own keeps that away from the publish and
subscription channels. Names and arguments come from ``queues.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pika.channel import Channel

from ackbridge.capabilities import CANNOT_TELL, DeadLetterTarget
from ackbridge.errors import AckbridgeError, BrokerError
from ackbridge.messages import QueueInfo
from ackbridge_rabbitmq import queues
from ackbridge_rabbitmq.errors import channel_error
from ackbridge_rabbitmq.io_thread import Fut
from ackbridge_rabbitmq.options import RabbitSettings

if TYPE_CHECKING:
    from ackbridge_rabbitmq.connection import Link

_Step = Callable[[Channel, Callable[[Any], None]], None]


class QueueAdmin:
    """The topology operations of one transport."""

    def __init__(self, link: Link, settings: RabbitSettings) -> None:
        self._link = link
        self._settings = settings
        #: Queues this connection declared, and whether with the dead-letter companion.
        self._declared: dict[str, bool] = {}

    def declare(self, name: str, *, dead_letter: bool) -> None:
        doing = f"declare queue {name!r}"
        steps: list[_Step] = []
        if dead_letter:
            dlx, dlq = queues.dead_letter_names(name)
            dlq_args = queues.dead_letter_queue_arguments(self._settings)
            steps += [
                lambda ch, nxt: ch.exchange_declare(dlx, "fanout", durable=True, callback=nxt),
                lambda ch, nxt: ch.queue_declare(dlq, durable=True, arguments=dlq_args, callback=nxt),
                lambda ch, nxt: ch.queue_bind(dlq, dlx, routing_key="", callback=nxt),
            ]
        args = queues.queue_arguments(name, self._settings, dead_letter=dead_letter)
        steps.append(lambda ch, nxt: ch.queue_declare(name, durable=True, arguments=args, callback=nxt))
        self._run(doing, steps)
        self._declared[name] = dead_letter

    def delete(self, name: str, *, dead_letter: bool) -> None:
        queues.check_queue_name(name)
        steps: list[_Step] = [lambda ch, nxt: ch.queue_delete(name, callback=nxt)]
        if dead_letter:
            dlx, dlq = queues.dead_letter_names(name)
            steps += [lambda ch, nxt: ch.queue_delete(dlq, callback=nxt),
                      lambda ch, nxt: ch.exchange_delete(dlx, callback=nxt)]
        self._declared.pop(name, None)
        self._run(f"delete queue {name!r}", steps)

    def purge(self, name: str) -> int | None:
        queues.check_queue_name(name)
        found: dict[str, int] = {}

        def purge(ch: Channel, nxt: Callable[[Any], None]) -> None:
            def done(frame: Any) -> None:
                found["count"] = frame.method.message_count
                nxt(frame)

            ch.queue_purge(name, callback=done)

        self._run(f"purge queue {name!r}", [purge])
        return found.get("count")

    def inspect(self, name: str) -> QueueInfo:
        messages, consumers = self._passive_declare(name)
        dlq: str | None = queues.dead_letter_names(name)[1]
        try:
            dead: int | None = self._passive_declare(dlq)[0] if dlq is not None else None
        except BrokerError:
            dlq, dead = None, None  # no dead-letter companion (declared with dead_letter=False, or elsewhere)
        return QueueInfo(name, messages=messages, unacked=None, consumers=consumers, dead_letter=dlq,
                         dead_lettered=dead)

    def dead_letter_target(self, source: str) -> DeadLetterTarget:
        """Where a message rejected from *source* goes. AMQP 0-9-1 cannot read a queue's
        arguments or policies, so this answers from what ackbridge made: the queue as this
        connection declared it, else whether its companion QUEUE.dlq exists (one passive
        declare of each, on one short-lived channel)."""
        if self._link.io.on_io():
            return CANNOT_TELL  # it would wait for this very thread
        queues.check_queue_name(source)
        known = queues.dead_letter_by_declare(source, self._declared.get(source))
        if known is not None:
            return known
        _, dlq = queues.dead_letter_names(source)
        seen: list[str] = []

        def passive(name: str) -> _Step:
            def step(ch: Channel, nxt: Callable[[Any], None]) -> None:
                def done(frame: Any) -> None:
                    seen.append(name)
                    nxt(frame)

                ch.queue_declare(name, passive=True, callback=done)
            return step

        try:
            self._run(f"look for the dead-letter companion of {source!r}", [passive(source), passive(dlq)])
        except AckbridgeError as exc:
            return queues.dead_letter_by_lookup(source, seen, exc)
        return queues.dead_letter_by_lookup(source, seen, None)

    def _passive_declare(self, name: str) -> tuple[int, int]:
        """(ready messages, consumers) of *name*; BrokerError (404) when it does not exist."""
        queues.check_queue_name(name)
        found: dict[str, int] = {}

        def declare(ch: Channel, nxt: Callable[[Any], None]) -> None:
            def done(frame: Any) -> None:
                found.update(messages=frame.method.message_count, consumers=frame.method.consumer_count)
                nxt(frame)

            ch.queue_declare(name, passive=True, callback=done)

        self._run(f"inspect queue {name!r}", [declare])
        return found["messages"], found["consumers"]

    def _run(self, doing: str, steps: Sequence[_Step]) -> None:
        """Run *steps* on a short-lived channel (on the I/O thread) and wait for them."""
        self._link.submit(lambda fut: self._with_channel(fut, doing, steps), doing)

    def _with_channel(self, fut: Fut[Any], doing: str, steps: Sequence[_Step]) -> None:
        """Open a short-lived channel, run *steps* one after another, close it.
        A broker error closes the channel: it resolves *fut* with BrokerError."""
        conn = self._link.require_conn(doing)

        def on_close(ch: Channel, reason: BaseException) -> None:
            if not fut.done():
                fut.set_exception(channel_error(reason, doing))

        def on_open(ch: Channel) -> None:
            ch.add_on_close_callback(on_close)
            pending = iter(steps)

            def next_step(_frame: Any = None) -> None:
                step = next(pending, None)
                if step is None:
                    if not fut.done():
                        fut.set_result(None)
                    if ch.is_open:
                        ch.close()
                    return
                try:
                    step(ch, next_step)
                except Exception as exc:
                    if not fut.done():
                        fut.set_exception(channel_error(exc, doing))

            next_step()

        conn.channel(on_open_callback=on_open)
