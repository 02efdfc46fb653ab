"""In-memory OpenTelemetry readers, and one harness per broker for the counting tests.

Each broker's harness is the one its own conformance tests use; a broker that is
not running fails in CI (CI=true) and skips locally, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ackbridge import observability
from tests.conftest import require_port


class Metrics:
    """What an in-memory reader holds, summed by instrument and attributes."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def total(self, name: str, **match: Any) -> float:
        """Sum of counter (or gauge) points of *name* whose attributes include *match*
        (keys with dots spelled with underscores: messaging_operation_name=...)."""
        want = {k.replace("__", "."): v for k, v in match.items()}
        return sum(p.value for p in self.points(name) if all(p.attributes.get(k) == v for k, v in want.items()))

    def count(self, name: str, **match: Any) -> int:
        """Number of recordings of histogram *name* matching *match*."""
        want = {k.replace("__", "."): v for k, v in match.items()}
        return sum(p.count for p in self.points(name) if all(p.attributes.get(k) == v for k, v in want.items()))

    def attribute_values(self) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [v for r in (data.resource_metrics if data else []) for s in r.scope_metrics for m in s.metrics
                for p in m.data.data_points for v in p.attributes.values()]


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    observability.configure(meter_provider=provider)
    try:
        yield Metrics(reader)
    finally:
        observability.configure()
        provider.shutdown()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observability.configure(tracer_provider=provider)
    try:
        yield exporter
    finally:
        observability.configure()
        provider.shutdown()


BROKERS = ["embedded", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq),
           pytest.param("mqtt", marks=pytest.mark.mqtt), pytest.param("amqp10", marks=pytest.mark.amqp10),
           pytest.param("nats", marks=pytest.mark.nats),
           pytest.param("rabbitmq-streams", marks=pytest.mark.rabbitmq_streams)]


def make_harness(name: str, tmp_path: Path) -> Any:
    if name == "embedded":
        from tests.local.harness import LocalHarness
        return LocalHarness(tmp_path)
    if name == "rabbitmq":
        require_port(5672, "RabbitMQ")
        require_port(15672, "RabbitMQ management API")
        from tests.rabbitmq.harness import RabbitHarness
        return RabbitHarness("classic")
    if name == "mqtt":
        require_port(1883, "Mosquitto")
        from tests.mqtt.harness import MqttHarness
        return MqttHarness("5")
    if name == "amqp10":
        require_port(5672, "RabbitMQ (AMQP 1.0)")
        require_port(15672, "RabbitMQ management API")
        from tests.amqp10.harness import Amqp10Harness
        return Amqp10Harness()
    if name == "rabbitmq-streams":
        require_port(5552, "RabbitMQ's stream plugin")
        from tests.rabbitmq_streams.harness import StreamsHarness
        return StreamsHarness()
    require_port(4222, "nats-server (JetStream)")
    from tests.nats.harness import NatsHarness
    return NatsHarness()


@pytest.fixture(params=BROKERS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    h = make_harness(request.param, tmp_path)
    try:
        yield h
    finally:
        h.cleanup()
