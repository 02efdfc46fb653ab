"""Each broker's topology rows of the capability table against what its plugin does.

For every broker and every topology verb: a verb the table declares (native or
emulated) must work, checked by its effect (declare, then three confirmed publishes
the queue holds; purge leaves none; delete leaves nothing to inspect), and a verb it
declares unsupported must raise ``UnsupportedVerbError``. A plugin that gains or
loses a verb without its row changing fails here (NATS's declare, delete and purge
were listed unsupported while declare worked)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.capabilities import Topology
from ackbridge.errors import BrokerError, UnsupportedVerbError
from ackbridge.testing import eventually
from tests.conftest import require_port

#: broker -> (port to require or None, URL maker, queue-name maker)
BROKERS: dict[str, tuple[int | None, Any, Any]] = {
    "embedded": (None, lambda tmp: f"local://{tmp}/captab.db", lambda tag: f"captab-{tag}"),
    "rabbitmq": (5672, lambda tmp: "amqp://guest:guest@127.0.0.1:5672/", lambda tag: f"captab-{tag}"),
    "mqtt": (1883, lambda tmp: "mqtt://127.0.0.1:1883/", lambda tag: f"captab/{tag}"),
    "amqp10": (5672, lambda tmp: "amqp10://guest:guest@127.0.0.1:5672/", lambda tag: f"captab-{tag}"),
    "nats": (4222, lambda tmp: "nats://127.0.0.1:4222", lambda tag: f"captab.{tag}"),
    "rabbitmq-streams": (5552, lambda tmp: "rabbitmq-stream://guest:guest@127.0.0.1:5552/",
                         lambda tag: f"captab-{tag}"),
}
MARKS = {"embedded": [], "rabbitmq": [pytest.mark.rabbitmq], "mqtt": [pytest.mark.mqtt],
         "amqp10": [pytest.mark.amqp10], "nats": [pytest.mark.nats],
         "rabbitmq-streams": [pytest.mark.rabbitmq_streams]}


@pytest.fixture
def leftovers() -> Iterator[list[str]]:
    """RabbitMQ queues a broker without delete leaves behind (AMQP 1.0), removed afterwards."""
    names: list[str] = []
    yield names
    if names:
        from tests.rabbitmq.harness import delete_queue
        for name in names:
            delete_queue(name)


@pytest.mark.parametrize("broker", [pytest.param(b, marks=MARKS[b]) for b in BROKERS])
def test_topology_rows_match_what_the_plugin_does(broker: str, tmp_path: Path, leftovers: list[str]) -> None:
    port, make_url, make_queue = BROKERS[broker]
    if port is not None:
        require_port(port, broker)
    queue = make_queue(uuid.uuid4().hex[:8])
    with ackbridge.connect(make_url(tmp_path)) as conn:
        caps = conn.capabilities
        has = {verb: caps.topology_support(verb).available for verb in Topology}

        def refused(verb: Topology, call: Any) -> None:
            with pytest.raises(UnsupportedVerbError):
                call()
            has[verb] = False

        if has[Topology.DECLARE_QUEUE]:
            # Without the dead-letter companion: AMQP 1.0 cannot create one (it raises, and says so).
            conn.declare_queue(queue, dead_letter=False)
        else:
            refused(Topology.DECLARE_QUEUE, lambda: conn.declare_queue(queue, dead_letter=False))
            pytest.skip(f"{broker} declares no declare_queue: the other rows need a queue")  # none today
        if not has[Topology.DELETE_QUEUE] and broker == "amqp10":
            leftovers.append(queue)
        for n in range(3):
            assert conn.publish(queue, b"x", message_id=str(n)).result().confirmed

        def depth() -> int | None:
            return conn.inspect_queue(queue).messages

        if has[Topology.INSPECT_QUEUE]:
            info = conn.inspect_queue(queue)
            assert info.name == queue
            if info.messages is not None:
                eventually(lambda: depth() == 3, message=f"{broker}: inspect shows the 3 published")
        else:
            refused(Topology.INSPECT_QUEUE, lambda: conn.inspect_queue(queue))

        if has[Topology.PURGE_QUEUE]:
            purged = conn.purge_queue(queue)
            assert purged in (3, None), purged
            if has[Topology.INSPECT_QUEUE] and depth() is not None:
                eventually(lambda: depth() == 0, message=f"{broker}: nothing left after purge")
        else:
            refused(Topology.PURGE_QUEUE, lambda: conn.purge_queue(queue))

        if has[Topology.DELETE_QUEUE]:
            conn.delete_queue(queue, dead_letter=False)
            if has[Topology.INSPECT_QUEUE]:
                # Gone, or (the embedded broker, where every name is a queue) empty.
                try:
                    left = conn.inspect_queue(queue).messages
                except BrokerError:
                    left = None
                assert not left, f"{broker}: {left} messages after delete"
        else:
            refused(Topology.DELETE_QUEUE, lambda: conn.delete_queue(queue, dead_letter=False))
