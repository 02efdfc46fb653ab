"""A scripted asyncio transport for the core's unit tests: every step answered at once.

Subclasses override what their test scripts (a publish answered inside the call, a
settlement recorded); the rest of the contract does nothing, on generation 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ackbridge.capabilities import Capabilities, Verb, native
from ackbridge.messages import OutboundMessage, WireSettle
from ackbridge.options import CONNECTION_OPTIONS, CORE_OPTIONS, resolve_options
from ackbridge.transport import AsyncTransport

CAPABILITIES = Capabilities(broker="scripted", verbs={verb: native() for verb in Verb})


class QuietAsyncTransport(AsyncTransport):
    capabilities = CAPABILITIES

    @property
    def generation(self) -> int:
        return 1

    async def open_async(self) -> None:
        pass

    async def close_async(self) -> None:
        pass

    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        pass

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        pass

    async def unsubscribe_async(self, subscription: str) -> None:
        pass

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        pass

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        pass


def default_options() -> tuple[dict[str, Any], dict[str, Any]]:
    """The core's and the connection's options, all defaults."""
    return (resolve_options(CORE_OPTIONS, {}, owner="test"), resolve_options(CONNECTION_OPTIONS, {}, owner="test"))
