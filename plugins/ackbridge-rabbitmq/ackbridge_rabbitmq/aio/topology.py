"""Queue declaration, deletion, purge and inspection, each on a short-lived channel (aio-pika).

Names, arguments and the answers are the pika transport's (``queues.py``,
``topology.py``): a broker error (404, 406...) closes the channel it happened
on, so each operation gets a channel of its own, away from the publish and
subscription channels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence

from aiormq.abc import AbstractChannel as WireChannel

from ackbridge.capabilities import DeadLetterTarget
from ackbridge.errors import AckbridgeError, BrokerError
from ackbridge.messages import QueueInfo
from ackbridge_rabbitmq import queues
from ackbridge_rabbitmq.aio.errors import channel_error
from ackbridge_rabbitmq.aio.link import Link
from ackbridge_rabbitmq.options import RabbitSettings

_Step = Callable[[WireChannel], Awaitable[object]]


class QueueAdmin:
    """The topology operations of one transport."""

    def __init__(self, link: Link, settings: RabbitSettings) -> None:
        self._link = link
        self._settings = settings
        #: Queues this connection declared, and whether with the dead-letter companion.
        self._declared: dict[str, bool] = {}

    async def declare(self, name: str, *, dead_letter: bool) -> None:
        steps: list[_Step] = []
        if dead_letter:
            dlx, dlq = queues.dead_letter_names(name)
            dlq_args = queues.dead_letter_queue_arguments(self._settings)
            steps += [
                lambda ch: ch.exchange_declare(dlx, exchange_type="fanout", durable=True),
                lambda ch: ch.queue_declare(dlq, durable=True, arguments=dlq_args),
                lambda ch: ch.queue_bind(dlq, dlx, routing_key=""),
            ]
        args = queues.queue_arguments(name, self._settings, dead_letter=dead_letter)
        steps.append(lambda ch: ch.queue_declare(name, durable=True, arguments=args))
        await self._run(f"declare queue {name!r}", steps)
        self._declared[name] = dead_letter

    async def delete(self, name: str, *, dead_letter: bool) -> None:
        queues.check_queue_name(name)
        steps: list[_Step] = [lambda ch: ch.queue_delete(name)]
        if dead_letter:
            dlx, dlq = queues.dead_letter_names(name)
            steps += [lambda ch: ch.queue_delete(dlq), lambda ch: ch.exchange_delete(dlx)]
        self._declared.pop(name, None)
        await self._run(f"delete queue {name!r}", steps)

    async def purge(self, name: str) -> int | None:
        queues.check_queue_name(name)
        found: list[int] = []

        async def purge(ch: WireChannel) -> None:
            found.append((await ch.queue_purge(name)).message_count or 0)

        await self._run(f"purge queue {name!r}", [purge])
        return found[0] if found else None

    async def inspect(self, name: str) -> QueueInfo:
        messages, consumers = await self._passive_declare(name)
        dlq: str | None = queues.dead_letter_names(name)[1]
        try:
            dead: int | None = (await self._passive_declare(dlq))[0] if dlq is not None else None
        except BrokerError:
            dlq, dead = None, None  # no dead-letter companion (declared with dead_letter=False, or elsewhere)
        return QueueInfo(name, messages=messages, unacked=None, consumers=consumers, dead_letter=dlq,
                         dead_lettered=dead)

    async def dead_letter_target(self, source: str) -> DeadLetterTarget:
        """As the pika transport answers (``topology.QueueAdmin.dead_letter_target``)."""
        queues.check_queue_name(source)
        known = queues.dead_letter_by_declare(source, self._declared.get(source))
        if known is not None:
            return known
        _, dlq = queues.dead_letter_names(source)
        seen: list[str] = []

        def passive(name: str) -> _Step:
            async def step(ch: WireChannel) -> None:
                await ch.queue_declare(name, passive=True)
                seen.append(name)
            return step

        try:
            await self._run(f"look for the dead-letter companion of {source!r}", [passive(source), passive(dlq)])
        except AckbridgeError as exc:
            return queues.dead_letter_by_lookup(source, seen, exc)
        return queues.dead_letter_by_lookup(source, seen, None)

    async def _passive_declare(self, name: str) -> tuple[int, int]:
        """(ready messages, consumers) of *name*; BrokerError (404) when it does not exist."""
        queues.check_queue_name(name)
        found: list[tuple[int, int]] = []

        async def declare(ch: WireChannel) -> None:
            ok = await ch.queue_declare(name, passive=True)
            found.append((ok.message_count or 0, ok.consumer_count or 0))

        await self._run(f"inspect queue {name!r}", [declare])
        return found[0]

    async def _run(self, doing: str, steps: Sequence[_Step]) -> None:
        """Run *steps* one after another on a short-lived channel, then close it."""
        connection = self._link.require(doing)
        channel = None
        try:
            channel = await connection.channel(publisher_confirms=False)
            wire = await channel.get_underlay_channel()
            for step in steps:
                await step(wire)
        except AckbridgeError:
            raise
        except Exception as exc:
            raise channel_error(exc, doing) from None
        finally:
            if channel is not None and not channel.is_closed:
                with contextlib.suppress(Exception):
                    await channel.close()
