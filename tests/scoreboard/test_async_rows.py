"""The scoreboard's asyncio CI tier (issue 38): per asyncio transport of ``connect_async``
(``threaded``, ``aio-pika``), one consumer fault and one publisher row on RabbitMQ, a few
hundred ids each.

A cell fails on LOST > 0 or UNEXPECTED > 0, when it cannot run (never a skip) or when its
connections ran on another transport than the row names. The full-size run is
``python -m tests.scoreboard.async_scoreboard --n 2000`` (docs/scoreboard.md, "Asyncio transports").
"""

from __future__ import annotations

import pytest

from tests.conftest import require_port
from tests.scoreboard import async_publisher
from tests.scoreboard.async_brokers import ASYNC_BROKERS, ASYNC_CI_FAULTS, AsyncBrokerEntry
from tests.scoreboard.async_scoreboard import run_consumer_cell
from tests.scoreboard.checker import markdown
from tests.scoreboard.publisher_rows import markdown as publisher_markdown
from tests.scoreboard.test_scoreboard_ci import PREFETCH, WINDOW

#: ids per cell (the sync CI tier's publisher rows use 300 too).
N = 300

#: One consumer fault per transport: a broker-side cut (the workload's own connection reconnects on
#: the loop) on classic queues; a publisher row per transport, retransmit (every id delivered once) on quorum.
CONSUMER_CELLS = [
    pytest.param(entry, "connection-cut", id=f"{entry.name}-connection-cut",
                 marks=[pytest.mark.slow, pytest.mark.rabbitmq])
    for entry in ASYNC_BROKERS if entry.queue_type == "classic" and "connection-cut" in ASYNC_CI_FAULTS
]
PUBLISHER_CELLS = [
    pytest.param(broker, fault, mode, id=f"{broker}-{fault}-{mode}", marks=[pytest.mark.slow, pytest.mark.rabbitmq])
    for broker, fault, mode in async_publisher.cells(modes=["retransmit"]) if "quorum" in broker
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("entry", "fault"), CONSUMER_CELLS)
def test_async_consumer_cell_loses_nothing(entry: AsyncBrokerEntry, fault: str) -> None:
    require_port(5672, "RabbitMQ")
    row = run_consumer_cell(entry, fault, N)
    table = markdown([row])
    print(table)
    assert not row.error, table
    assert row.injections == 2, table  # the publisher's connection and the consumer's, each cut once
    assert row.lost == 0, table
    assert row.unexpected == 0, table
    assert row.delivered >= row.confirmed, table
    # At-least-once duplicates stay within what was in flight when each fault hit.
    assert row.duplicated <= (PREFETCH + WINDOW) * row.injections, table


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("broker", "fault", "mode"), PUBLISHER_CELLS)
def test_async_publisher_row(broker: str, fault: str, mode: str) -> None:
    require_port(5672, "RabbitMQ")
    require_port(15672, "RabbitMQ management (bash scripts/brokers.sh)")
    row = async_publisher.run_cell(broker, fault, mode, N)
    table = publisher_markdown([row])
    print(table)
    assert not row.error, table
    assert row.injections == 1 and row.pending_at_fault > 0, table
    assert row.lost == 0 and row.unexpected == 0, f"{table}\nLOST ids: {row.lost_timeline}"
    assert row.left == 0, table  # broker-side: ready + unacked after the drain
    # A queue that exists never refuses a publish: a confirm pending at a cut is unknown, and
    # retransmission sends it again. A refusal here would excuse an id that was never delivered.
    assert row.refused == 0, table
    assert row.indeterminate == 0 and row.delivered == row.attempted, table
    assert row.app_duplicates == 0, table
    assert row.passed, table
