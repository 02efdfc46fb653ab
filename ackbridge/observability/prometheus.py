"""Serve ackbridge's OpenTelemetry metrics for Prometheus to scrape.

Needs the extra ``ackbridge[prometheus]`` (prometheus-client, the OpenTelemetry
SDK and its Prometheus exporter). Two ways in:

- :func:`metric_reader`: a reader to add to the application's own
  ``MeterProvider`` (its metrics and ackbridge's on one endpoint);
- :func:`serve`: a ``MeterProvider`` for ackbridge alone plus an HTTP endpoint
  (what ``ackbridge consume --metrics-port`` uses).

Names follow the exporter's translation: ``ackbridge.settled`` is scraped as
``ackbridge_settled_total``, ``ackbridge.confirm.duration`` (s) as
``ackbridge_confirm_duration_seconds``; attributes become labels with dots as
underscores (``messaging_operation_name="ack"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ackbridge.errors import ConfigurationError
from ackbridge.observability import _providers


def _require() -> None:
    try:
        import opentelemetry.exporter.prometheus
        import opentelemetry.sdk.metrics  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(f"Prometheus metrics need: pip install 'ackbridge[prometheus]' ({exc})") from None


def metric_reader(registry: Any = None) -> Any:
    """An OpenTelemetry metric reader that feeds *registry* (prometheus_client's
    default registry when None); add it to your ``MeterProvider``."""
    _require()
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    if registry is None:
        return PrometheusMetricReader()
    return PrometheusMetricReader(registry=registry)


@dataclass
class MetricsServer:
    """A running endpoint: ``http://{address}:{port}/metrics``."""

    address: str
    port: int
    provider: Any
    _server: Any
    _thread: Any

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self.provider.shutdown()
        _providers.configure()


def serve(port: int, address: str = "127.0.0.1") -> MetricsServer:
    """Record ackbridge's metrics to a new ``MeterProvider`` (for connections opened
    from now on) and serve them on *address*:*port* (0: any free port)."""
    _require()
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[metric_reader(registry)])
    server, thread = start_http_server(port, address, registry=registry)
    _providers.configure(meter_provider=provider, tracer_provider=_providers._tracer_provider)
    return MetricsServer(address, server.server_port, provider, server, thread)
