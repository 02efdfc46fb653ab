"""close() during an unfinished reconnect closes that attempt's socket itself.

The RabbitMQ transport dropped a reconnect still opening when it closed ("its socket
goes with the loop"), but stopping pika's I/O loop closes no socket: the attempt's
socket stayed open until a garbage collection found it, with a ResourceWarning that
failed whichever test was running then (once in CI). Here the reconnect is held in
its AMQP handshake by a proxy that forwards nothing, and close() must leave no
socket of this process open, with the collector off.
"""

from __future__ import annotations

import pytest

import ackbridge
from ackbridge.testing import eventually
from ackbridge.testing.proxy import FaultProxy
from tests.conftest import require_port
from tests.sockets import open_sockets

pytestmark = pytest.mark.rabbitmq


@pytest.mark.usefixtures("no_collection")
def test_close_while_a_reconnect_is_opening_closes_its_socket() -> None:
    require_port(5672, "RabbitMQ")
    before = open_sockets()
    with FaultProxy(5672) as proxy:
        conn = ackbridge.connect(f"amqp://guest:guest@127.0.0.1:{proxy.port}/", connect_timeout=30)
        proxy.blackhole(True)  # the next attempt connects to the proxy and hears nothing back
        proxy.reset()
        eventually(lambda: proxy.connections_seen >= 2, 20, message="the reconnect reached the proxy")
        assert open_sockets() > before  # the check sees the attempt's socket at all
        conn.close()
        proxy.blackhole(False)
    # Counted once the proxy closed its own sockets too (they live in this process).
    eventually(lambda: open_sockets() <= before, 10, message="every socket of the connection closed")
