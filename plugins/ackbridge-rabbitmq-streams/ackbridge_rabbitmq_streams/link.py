"""Opening one rstream :class:`~rstream.client.Client` (one stream-protocol connection).

The plugin talks to rstream's client layer (``rstream.client.Client`` and the
``rstream.schema`` frames, public modules) rather than its ``Producer`` and
``Consumer``: those recover on their own, pick subscription ids and grant
credit before a chunk is processed, where ackbridge needs each of those under
its own control (generations, prefetch, exact offset ranges).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable

from rstream.client import Client
from rstream.utils import OnClosedErrorInfo

from ackbridge_rabbitmq_streams.endpoint import Endpoint
from ackbridge_rabbitmq_streams.errors import stream_error
from ackbridge_rabbitmq_streams.log_filter import hide_credentials_in_frame_logs

log = logging.getLogger("ackbridge.rabbitmq_streams")
hide_credentials_in_frame_logs()

#: rstream's own default; a chunk is delivered whole whatever this says.
FRAME_MAX = 1024 * 1024
#: Marks a client so rstream calls its closed handler (it only does so for
#: clients that serve at least one stream).
WATCHED = "ackbridge"


async def open_client(endpoint: Endpoint, name: str,
                      on_closed: Callable[[str], Awaitable[None] | None] | None = None) -> Client:
    """A started, authenticated client; *on_closed(reason)* runs on the loop when
    the connection ends without :func:`close_client`."""

    async def closed(info: OnClosedErrorInfo) -> None:
        if on_closed is not None:
            result = on_closed(info.reason)
            if result is not None:
                await result

    timeout = endpoint.connection.connect_timeout
    heartbeat = endpoint.connection.heartbeat
    client = Client(endpoint.host, endpoint.port, ssl_context=endpoint.tls, frame_max=FRAME_MAX,
                    heartbeat=0 if heartbeat == 0 else max(1, math.ceil(heartbeat)), connection_name=name,
                    connection_closed_handler=closed)
    try:
        await asyncio.wait_for(client.start(), timeout)
        await asyncio.wait_for(
            client.authenticate(endpoint.vhost, endpoint.username, endpoint.password.reveal()), timeout)
    except (Exception, asyncio.CancelledError) as exc:
        await close_client(client)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise stream_error(exc, "connect", endpoint.url) from None
    client.add_stream(WATCHED)
    return client


async def close_client(client: Client) -> None:
    """Close *client* without waiting long for a broker that is gone; never raises."""
    if client.is_connection_alive():
        await client.remove_stream(WATCHED)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), 6)


async def barrier(client: Client, stream: str) -> None:
    """A round trip on *client*'s connection: the broker answers it after
    every frame it sent before (it handles one connection's commands in order,
    and sends the chunks a subscribe makes available before its next answer).
    The loop then runs once more so rstream's delivery tasks have handed them on."""
    await client.stream_exists(stream)
    for _ in range(5):
        await asyncio.sleep(0)
