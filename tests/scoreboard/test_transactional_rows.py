"""The transactional rows' CI tier (issue 35): one fault per broker, PostgreSQL and SQLite taken
in turn. The grid (every broker x both databases x every fault) is
``python -m tests.scoreboard.transactional_grid`` (docs/scoreboard.md, "Transactional rows").

A cell fails on LOST > 0, a duplicated effect, an unexpected id, anything left on the broker or
in the outbox, a fault that did not happen where it was aimed, or when it cannot run (never a skip).
"""

from __future__ import annotations

import pytest

from tests.conftest import require_port
from tests.scoreboard.transactional_cells import markdown
from tests.scoreboard.transactional_grid import run_cell

#: ids per CI cell, and how many of them are published twice.
N, COPIES = 100, 20

MARKS = {"mqtt": pytest.mark.mqtt, "rabbitmq": pytest.mark.rabbitmq, "amqp10": pytest.mark.amqp10,
         "nats": pytest.mark.nats, "rabbitmq-streams": pytest.mark.rabbitmq_streams}
PORTS = {"mqtt": (1883, "Mosquitto"), "rabbitmq": (5672, "RabbitMQ"), "amqp10": (5672, "RabbitMQ (AMQP 1.0)"),
         "nats": (4222, "NATS (JetStream)"), "rabbitmq-streams": (5552, "RabbitMQ streams (rabbitmq_stream)")}

#: One fault per broker: the consumer kills where the issue's first promise is tested on every
#: broker; the relay kill where RabbitMQ runs twice (quorum), so the outbox is in CI beyond
#: tests/transactional (embedded and classic RabbitMQ there).
CI_CELLS = [
    ("embedded", "postgres", "consumer-kills"),
    ("rabbitmq-classic", "sqlite", "consumer-kills"),
    ("rabbitmq-quorum", "postgres", "relay-kill"),
    ("amqp10-rabbitmq", "sqlite", "consumer-kills"),
    ("mqtt-5", "postgres", "consumer-kills"),
    ("nats-jetstream", "sqlite", "consumer-kills"),
    ("rabbitmq-streams", "postgres", "consumer-kills"),
]


def _marks(broker: str, db: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow, *(m for k, m in MARKS.items() if broker.startswith(k))]
    return [*marks, pytest.mark.postgres] if db == "postgres" else marks


CELLS = [pytest.param(broker, db, fault, id=f"{broker}-{db}-{fault}", marks=_marks(broker, db))
         for broker, db, fault in CI_CELLS]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("broker", "db", "fault"), CELLS)
def test_transactional_row(broker: str, db: str, fault: str) -> None:
    for prefix, (port, what) in PORTS.items():
        if broker.startswith(prefix):
            require_port(port, what)
    if db == "postgres":
        require_port(5432, "PostgreSQL")
    row = run_cell(broker, db, fault, N, COPIES)
    table = markdown([row])
    print(table)
    assert not row.error and not row.gap, table
    assert row.ids == N and row.effects == N, table
    assert (row.lost, row.duplicates, row.unexpected) == (0, 0, 0), table
    assert row.left == 0, table
    if fault == "consumer-kills":
        assert row.injected.startswith("4 kills (2 before commit, 2 after commit"), table
        # The copies the broker stored reached the inbox and were acked without running the handler.
        assert row.skipped >= row.stored - N, table
    else:
        assert (row.outbox_left, row.refused) == ("0", "0"), table
    assert row.passed, table
