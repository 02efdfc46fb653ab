"""The asyncio face's settlements, queued and written by one writer task (issue 39).

The asyncio face settles one delivery per call; a write per call cost more than the
rest of its settle path. The transport checks each call's operations at once (a
stale one still raises in the caller) and queues them here; one writer task writes
what is queued from the next loop turn, in call order, until nothing is left, so
what the caller settled meanwhile goes out in the same write. Queued operations
belong to the client (the generation) they were checked against: a loss drops them
(the transport contract: dropped, never applied; JetStream redelivers them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client

from ackbridge.messages import WireSettle
from ackbridge_nats.link import describe

log = logging.getLogger("ackbridge.nats")


class SettleQueue:
    """Settlements checked and waiting for the writer; *client_of* is the link's current
    client, *apply* writes a run of settlements on a client."""

    def __init__(self, client_of: Callable[[], Client | None],
                 apply: Callable[[Client, Sequence[WireSettle]], Awaitable[None]]) -> None:
        self.queued: list[WireSettle] = []
        #: The client the queued settlements were checked against (their generation's).
        self._queued_on: Client | None = None
        self._writer: asyncio.Task[None] | None = None
        self._client_of = client_of
        self._apply = apply

    def add(self, client: Client, ops: Sequence[WireSettle]) -> None:
        """Queue *ops*, checked against *client*; start the writer if none runs."""
        if self._queued_on is not client:
            self.queued, self._queued_on = [], client
        self.queued.extend(ops)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    def drop(self) -> None:
        """Their generation ended: dropped, not applied (redelivered)."""
        self.queued = []

    async def _write(self) -> None:
        try:
            while self.queued:
                ops, self.queued = self.queued, []
                client = self._client_of()
                if client is None or client is not self._queued_on or not client.is_connected:
                    continue  # lost the race with a loss: dropped, not applied (the transport contract)
                try:
                    await self._apply(client, ops)
                except Exception as exc:
                    log.warning("ackbridge-nats: %d settlement(s) not written: %s", len(ops), describe(exc))
        finally:
            self._writer = None

    async def written(self) -> None:
        """Wait until what was queued is written (before a release or a close)."""
        writer = self._writer
        if writer is not None and writer is not asyncio.current_task():
            await asyncio.wait({writer})
