"""What the inbox and the relay record: counters, last readings, and log lines.

Logs go to ``ackbridge.transactional``; metrics through
:mod:`ackbridge.observability` (nothing recorded, nothing paid, when no meter
provider is configured). The gauges (inbox size, outbox backlog and age) are
the readings of the last commit or relay round, kept here: a metrics reader on
its own thread never touches the application's connection.
"""

from __future__ import annotations

import logging
from typing import Any

from ackbridge.observability import attributes as attr
from ackbridge.observability.metrics import instruments_in_use

log = logging.getLogger("ackbridge.transactional")


class Recorder:
    """One inbox's or relay's instruments and readings (*labels*: its table and endpoint)."""

    def __init__(self, **labels: str) -> None:
        self.labels = {f"ackbridge.{key}": value for key, value in labels.items()}
        self._readings: dict[str, float] = {}
        self._outcomes: dict[str, dict[str, Any]] = {}
        self._instruments = instruments_in_use()
        if self._instruments is not None:
            self._instruments.transactional.add(self)

    def duplicate(self, count: int = 1) -> None:
        if self._instruments is not None:
            self._instruments.inbox_duplicates.add(count, self.labels)

    def relay_outcome(self, destination: str, outcome: str, count: int = 1) -> None:
        if self._instruments is None:
            return
        key = f"{destination}\0{outcome}"
        attributes = self._outcomes.get(key)
        if attributes is None:
            attributes = self._outcomes[key] = {**self.labels, attr.DESTINATION: destination,
                                                attr.OUTCOME: outcome}
        self._instruments.relay_outcomes.add(count, attributes)

    def reading(self, gauge: str, value: float) -> None:
        self._readings[gauge] = value

    def readings(self) -> list[tuple[str, float, dict[str, Any]]]:
        """The gauges' last values (called by the metrics reader)."""
        return [(gauge, value, self.labels) for gauge, value in list(self._readings.items())]
