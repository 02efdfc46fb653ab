"""Which OpenTelemetry providers ackbridge records to, resolved once per connection.

Recording is on only when the OpenTelemetry API is importable AND a real
provider is there: one given to :func:`configure`, or an SDK provider set
globally (``metrics.set_meter_provider``) before the connection opened. The
API's own no-op and proxy providers count as "not configured", so an
application that installs the API but no SDK pays one ``is None`` check per
recording point.
"""

from __future__ import annotations

from typing import Any

_meter_provider: Any = None
_tracer_provider: Any = None

try:  # the optional dependency (extra "otel")
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised in a venv without the API
    _metrics = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

#: The API's stand-ins: recording to them would cost time and keep nothing.
_STAND_INS = frozenset({"_ProxyMeterProvider", "NoOpMeterProvider", "ProxyTracerProvider", "NoOpTracerProvider"})


def available() -> bool:
    """True when the OpenTelemetry API is installed."""
    return _metrics is not None


def configure(*, meter_provider: Any = None, tracer_provider: Any = None) -> None:
    """Record to these providers instead of the global ones (None: the global one).
    Takes effect for connections opened afterwards."""
    global _meter_provider, _tracer_provider
    _meter_provider, _tracer_provider = meter_provider, tracer_provider


def meter_provider() -> Any:
    """The meter provider to record to, or None (recording off)."""
    if _meter_provider is not None:
        return _meter_provider
    if _metrics is None:
        return None
    provider = _metrics.get_meter_provider()
    return None if type(provider).__name__ in _STAND_INS else provider


def tracer_provider() -> Any:
    """The tracer provider to record spans to, or None (tracing off)."""
    if _tracer_provider is not None:
        return _tracer_provider
    if _trace is None:
        return None
    provider = _trace.get_tracer_provider()
    return None if type(provider).__name__ in _STAND_INS else provider
