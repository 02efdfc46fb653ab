"""What the inbox and the relay record through ackbridge.observability: duplicates
skipped, inbox size, relay outcomes, outbox backlog and age; and their log lines
under ``ackbridge.transactional``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import ackbridge
from ackbridge import observability
from ackbridge.transactional import Inbox, Outbox, Relay
from tests.local.harness import LocalHarness
from tests.transactional.appdb import AppDb
from tests.transactional.scenario import ids, publish_with_copies, work_for


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    found = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[found])
    observability.configure(meter_provider=provider)
    try:
        yield found
    finally:
        observability.configure()
        provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [p for r in (data.resource_metrics if data else []) for s in r.scope_metrics for m in s.metrics
            if m.name == name for p in m.data.data_points]


def total(reader: InMemoryMetricReader, name: str, **match: str) -> float:
    return sum(p.value for p in points(reader, name) if all(p.attributes.get(k) == v for k, v in match.items()))


def test_inbox_and_relay_metrics_and_logs(reader: InMemoryMetricReader, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    app_db = AppDb.sqlite(tmp_path)
    app_db.create_effects()
    harness = LocalHarness(tmp_path)
    try:
        queue, downstream = harness.new_queue(), harness.new_queue()
        publish_with_copies(harness, queue, ids(10), 4)
        db = app_db.connect()
        inbox = Inbox(db, table=app_db.inbox, endpoint="metrics")
        outbox = Outbox(table=app_db.outbox)
        outbox.create_tables(db)
        caplog.set_level(logging.DEBUG, logger="ackbridge.transactional")
        with ackbridge.connect(harness.url()) as conn:
            consumer = conn.consume(queue, prefetch=20)
            done = inbox.run_batches(consumer, work_for(app_db), size=5, idle_exit=1.0)
            consumer.close()
            assert (done.processed, done.duplicates) == (10, 4)
            labels = {"ackbridge.inbox": app_db.inbox, "ackbridge.endpoint": "metrics"}
            assert total(reader, "ackbridge.inbox_duplicates", **labels) == 4
            assert total(reader, "ackbridge.inbox.size", **labels) == 10
            assert any("duplicate" in r.getMessage() and r.name == "ackbridge.transactional"
                       for r in caplog.records)

            for name in ids(3, "x"):
                outbox.publish(db, downstream, b"x", message_id=name)
            outbox.publish(db, downstream, harness.oversized_body(), message_id="too-big")
            db.commit()
            relay = Relay(db, conn, table=app_db.outbox, batch=2)
            first = relay.run_once()
            assert first.backlog == 2 and first.oldest_age >= 0
            assert total(reader, "ackbridge.outbox.backlog", **{"ackbridge.outbox": app_db.outbox}) == 2
            relay.run(idle_exit=0.2)
        outcome = {"ackbridge.outbox": app_db.outbox, "messaging.destination.name": downstream}
        assert total(reader, "ackbridge.relay_outcomes", **outcome, **{"ackbridge.outcome": "confirmed"}) == 3
        assert total(reader, "ackbridge.relay_outcomes", **outcome, **{"ackbridge.outcome": "refused"}) == 1
        assert total(reader, "ackbridge.outbox.backlog", **{"ackbridge.outbox": app_db.outbox}) == 0
        assert total(reader, "ackbridge.outbox.age", **{"ackbridge.outbox": app_db.outbox}) == 0
        assert any("refused" in r.getMessage() for r in caplog.records if r.name == "ackbridge.transactional")
        db.close()
    finally:
        app_db.drop_all()
        harness.cleanup()
