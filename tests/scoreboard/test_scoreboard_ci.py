"""The scoreboard's CI tier: every broker x the faults that matter most, >= 1000 ids per cell.

A cell fails on LOST > 0 or UNEXPECTED > 0, or when it cannot run (never a skip).
The full matrix and the published table come from ``python -m tests.scoreboard.run``.
"""

from __future__ import annotations

import pytest

from tests.conftest import require_port
from tests.scoreboard.brokers import BROKERS, CI_FAULTS, BrokerEntry
from tests.scoreboard.checker import markdown
from tests.scoreboard.run import run_cell

#: The workload's consumer prefetch (50) and its publisher window (200).
PREFETCH, WINDOW = 50, 200


def in_flight_bound(entry: BrokerEntry) -> int:
    """Copies one fault can add. Where the client resends by itself (``client_resends``), a
    publish pending at the loss can arrive three times: stored before the loss, sent again by
    the client after its reconnect, retried by the workload; plus the one that met the loss."""
    return PREFETCH + WINDOW * (2 if entry.client_resends else 1) + int(entry.client_resends)

MARKS = {"mqtt": pytest.mark.mqtt, "rabbitmq": pytest.mark.rabbitmq, "amqp10": pytest.mark.amqp10,
         "nats": pytest.mark.nats, "rabbitmq-streams": pytest.mark.rabbitmq_streams}
PORTS = {"mqtt": (1883, "Mosquitto"), "rabbitmq": (5672, "RabbitMQ"), "amqp10": (5672, "RabbitMQ (AMQP 1.0)"),
         "nats": (4222, "NATS (JetStream)"), "rabbitmq-streams": (5552, "RabbitMQ streams (rabbitmq_stream)")}

CELLS = [
    pytest.param(entry, fault, id=f"{entry.name}-{fault}",
                 marks=[pytest.mark.slow, *(m for k, m in MARKS.items() if entry.name.startswith(k))])
    for entry in BROKERS for fault in entry.faults if fault in CI_FAULTS
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("entry", "fault"), CELLS)
def test_cell_loses_nothing(entry: object, fault: str) -> None:
    for prefix, (port, what) in PORTS.items():
        if entry.name.startswith(prefix):  # type: ignore[attr-defined]
            require_port(port, what)
    row = run_cell(entry, fault, 1000)  # type: ignore[arg-type]
    print(markdown([row]))
    assert not row.error, row.error
    assert row.lost == 0, markdown([row])
    assert row.unexpected == 0, markdown([row])
    assert row.delivered >= row.confirmed - int(row.dead_lettered.split("/")[0]), markdown([row])
    # At-least-once duplicates stay within what was in flight when each fault hit.
    assert row.duplicated <= in_flight_bound(entry) * max(1, row.injections), markdown([row])  # type: ignore[arg-type]
