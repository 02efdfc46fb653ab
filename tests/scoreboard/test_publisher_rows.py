"""The publisher rows' CI tier (issue 15): every broker x {connection cut, broker restart} x {plain, retransmit}.

A row fails on LOST > 0, UNEXPECTED > 0, messages left in the queue, or when it
cannot run (never a skip). With retransmission + dedupe_window, every
attempted id must be delivered (bar what a broker whose capability table says
"in memory until the next save" lost itself after confirming, counted apart)
and no copy may reach the application. The full-size run is
``python -m tests.scoreboard.publisher --n 2000`` (docs/scoreboard.md).
"""

from __future__ import annotations

import pytest

from tests.conftest import require_port
from tests.scoreboard.publisher import cells, markdown, run_cell

#: ids per cell in CI (a restart adds what is published while the broker is down)
N = 300

MARKS = {"mqtt": pytest.mark.mqtt, "rabbitmq": pytest.mark.rabbitmq, "amqp10": pytest.mark.amqp10,
         "nats": pytest.mark.nats, "rabbitmq-streams": pytest.mark.rabbitmq_streams}
#: Brokers on the shared ports (MQTT and NATS rows start private servers of their own).
PORTS = {"rabbitmq": (5672, "RabbitMQ"), "amqp10": (5672, "RabbitMQ (AMQP 1.0)"),
         "rabbitmq-streams": (5552, "RabbitMQ streams (rabbitmq_stream)")}

#: A restart of a broker on a shared port stops it for every other test too (run alone).
SHARED_RESTART = [pytest.mark.stops_shared_broker]
CELLS = [
    pytest.param(broker, fault, mode, id=f"{broker}-{fault}-{mode}",
                 marks=[pytest.mark.slow, *(m for k, m in MARKS.items() if broker.startswith(k)),
                        *(SHARED_RESTART if fault == "broker-restart" and broker.startswith(tuple(PORTS)) else [])])
    for broker, fault, mode in cells()
]


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("broker", "fault", "mode"), CELLS)
def test_publisher_row(broker: str, fault: str, mode: str) -> None:
    for prefix, (port, what) in PORTS.items():
        if broker.startswith(prefix):
            require_port(port, what)
            require_port(15672, "RabbitMQ management (bash scripts/brokers.sh)")
    row = run_cell(broker, fault, mode, N)
    table = markdown([row])
    print(table)
    assert not row.error, table
    assert row.injections == 1, table
    # The fault met publishes: confirms pending at the fault, unknowns (plain), sends again
    # (retransmit), or publishes made while a restart lasted. Publishes queued but not yet on
    # the wire are not resent, only sent late.
    met = row.pending_at_fault + row.indeterminate + row.retransmitted + row.published_during_fault
    assert met > 0, table
    assert row.lost == 0 and row.unexpected == 0, f"{table}\nLOST ids: {row.lost_timeline}"
    assert row.left in (0, None), table
    assert row.delivered >= row.confirmed - row.broker_lost, table
    # score() counts "lost by the broker" only on a kill and only where the capability table
    # declares a confirm in memory until the next save (LOSES_ON_KILL): never on a cut.
    assert fault != "connection-cut" or row.broker_lost == 0, table
    if mode == "retransmit":
        assert row.indeterminate == 0, table
        # A refusal is final and told to the application (MQTT 5 answers 0x10, no matching
        # subscribers, until the restarted broker's sessions subscribe again): not sent again.
        assert row.delivered == row.attempted - row.broker_lost - row.refused, f"{table}\nrefused {row.refused}"
        assert row.app_duplicates == 0, table
    assert row.passed, table
