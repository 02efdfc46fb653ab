"""Making a connection's observer: once, when the connection is made."""

from __future__ import annotations

from ackbridge.observability import _providers
from ackbridge.observability.attributes import connection_attributes
from ackbridge.observability.metrics import ConnectionObserver, instruments_for
from ackbridge.urls import BrokerURL


def connection_observer(url: BrokerURL, messaging_system: str) -> ConnectionObserver | None:
    """The connection's :class:`~ackbridge.observability.metrics.ConnectionObserver`,
    or None when neither metrics nor traces are configured (recording off)."""
    meters, tracers = _providers.meter_provider(), _providers.tracer_provider()
    if meters is None and tracers is None:
        return None
    from ackbridge import __version__

    tracer = tracers.get_tracer("ackbridge", __version__) if tracers is not None else None
    instruments = instruments_for(meters) if meters else None
    return ConnectionObserver(connection_attributes(url, messaging_system), instruments, tracer)
