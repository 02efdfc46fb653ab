"""The declared fault seam, for tests: it lives in :mod:`ackbridge.transport.faults`
(production code such as the Spark connector's fault options uses it there)."""

from ackbridge.transport.faults import FaultSeam, faults, transport_of

__all__ = ["FaultSeam", "faults", "transport_of"]
