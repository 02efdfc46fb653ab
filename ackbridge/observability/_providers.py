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
    return _in_use(_meter_provider, None if _metrics is None else _metrics.get_meter_provider)


def tracer_provider() -> Any:
    """The tracer provider to record spans to, or None (tracing off)."""
    return _in_use(_tracer_provider, None if _trace is None else _trace.get_tracer_provider)


def _in_use(configured: Any, global_provider: Any) -> Any:
    """*configured* if set, else the API's global provider unless it is a stand-in
    (no SDK: nothing would record); None when the API is not installed."""
    if configured is not None:
        return configured
    if global_provider is None:
        return None
    provider = global_provider()
    return None if type(provider).__name__ in _STAND_INS else provider
