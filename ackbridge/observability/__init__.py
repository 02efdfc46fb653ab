"""Metrics, traces and logs of ackbridge through OpenTelemetry (docs/observability.md).

Optional: install the extra ``ackbridge[otel]`` (the OpenTelemetry API) and
configure an SDK ``MeterProvider``/``TracerProvider`` -- globally, or here with
:func:`configure` -- before connecting. Without either, nothing is recorded and
nothing is paid beyond one ``is not None`` check at each recording point.

- :mod:`.metrics`: the instruments and the per-connection observers;
- :mod:`.tracing`: publish spans carrying ``traceparent``, settle spans linked to them;
- :mod:`.logs`: the ``ackbridge.*`` logger tree and client-library noise;
- :mod:`.prometheus`: serve the same metrics for Prometheus to scrape.
"""

from __future__ import annotations

from ackbridge.observability._providers import available, configure
from ackbridge.observability.observer import connection_observer

__all__ = ["available", "configure", "connection_observer"]
