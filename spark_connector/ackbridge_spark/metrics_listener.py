"""Turn each streaming query's progress into OpenTelemetry metrics (and so into
Prometheus, through :mod:`ackbridge.observability.prometheus`).

The ackbridge source reports its counters in every progress event as the JSON of
``sources[i].latestOffset`` (``reportLatestOffset``): cumulative counters
(settled, stale_refused, dropped_stale, reconnects, data_loss, labels_sent,
replay_duplicates_acked, batches_as_files) and levels (buffered, unsettled, seq). This listener
reads them on the driver and records:

- counters ``ackbridge.spark.<counter>``: the increase since the last event
  (a counter that went down -- a restarted source -- counts from its new value);
- gauges ``ackbridge.spark.buffered`` / ``.unsettled`` / ``.offset``: the last level;
- ``ackbridge.spark.input_rows`` (counter) and ``ackbridge.spark.batch.duration``
  (histogram, s: the trigger's execution time).

Attributes: ``ackbridge.spark.query`` (the query's name, else its id) and
``ackbridge.spark.source`` (the source's index in the query): never the source's
description or options, which may hold a broker URL.

    from ackbridge_spark.metrics_listener import AckbridgeMetricsListener
    spark.streams.addListener(AckbridgeMetricsListener())          # global MeterProvider
    spark.streams.addListener(AckbridgeMetricsListener(provider))   # or this one
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from pyspark.sql.streaming.listener import StreamingQueryListener
except ImportError:  # pragma: no cover - PySpark is this connector's dependency
    StreamingQueryListener = object  # type: ignore[misc,assignment]

COUNTERS = ("settled", "stale_refused", "dropped_stale", "reconnects", "data_loss", "labels_sent",
            "replay_duplicates_acked", "batches_as_files")
LEVELS = {"buffered": "buffered", "unsettled": "unsettled", "seq": "offset"}
QUERY = "ackbridge.spark.query"
SOURCE = "ackbridge.spark.source"


def ackbridge_sources(progress: Mapping[str, Any]) -> Iterable[tuple[int, dict[str, Any]]]:
    """(index, counters) of each ackbridge source in one progress (its JSON as a dict)."""
    for index, source in enumerate(progress.get("sources") or ()):
        offset = source.get("latestOffset")
        if isinstance(offset, str):
            try:
                offset = json.loads(offset)
            except ValueError:
                continue
        if isinstance(offset, dict) and "seq" in offset and "settled" in offset:
            yield index, offset


class ProgressMetrics:
    """The instruments, and what one progress event adds to them (no Spark needed)."""

    def __init__(self, meter_provider: Any = None) -> None:
        from opentelemetry import metrics
        from opentelemetry.metrics import Observation

        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter("ackbridge.spark")
        self._observation = Observation
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], dict[str, int]] = {}
        self._levels: dict[str, dict[tuple[str, int], float]] = {name: {} for name in LEVELS.values()}
        self.counters = {name: meter.create_counter(f"ackbridge.spark.{name}", "{message}",
                                                    f"The ackbridge source's {name.replace('_', ' ')}")
                         for name in COUNTERS}
        self.input_rows = meter.create_counter("ackbridge.spark.input_rows", "{row}", "Rows read by micro-batches")
        self.batch_duration = meter.create_histogram("ackbridge.spark.batch.duration", "s",
                                                     "A micro-batch trigger's execution time")
        for name in LEVELS.values():
            meter.create_observable_gauge(f"ackbridge.spark.{name}", [self._gauge(name)], "{message}",
                                          f"The ackbridge source's {name} (last progress event)")

    def _gauge(self, name: str) -> Any:
        def observe(_options: Any) -> list[Any]:
            with self._lock:
                levels = dict(self._levels[name])
            return [self._observation(value, {QUERY: query, SOURCE: index}) for (query, index), value in levels.items()]
        return observe

    def record(self, progress: Mapping[str, Any]) -> None:
        """Record one progress event (``json.loads(event.progress.json)``)."""
        query = str(progress.get("name") or progress.get("id") or "query")
        rows = progress.get("numInputRows") or 0
        if rows:
            self.input_rows.add(int(rows), {QUERY: query})
        duration = (progress.get("durationMs") or {}).get("triggerExecution")
        if duration is not None:
            self.batch_duration.record(float(duration) / 1000.0, {QUERY: query})
        for index, offset in ackbridge_sources(progress):
            attributes: dict[str, str | int] = {QUERY: query, SOURCE: index}
            with self._lock:
                last = self._last.setdefault((query, index), {})
                for name in COUNTERS:
                    value = int(offset.get(name) or 0)
                    before = last.get(name, 0)
                    increase = value - before if value >= before else value  # restarted source
                    last[name] = value
                    if increase:
                        self.counters[name].add(increase, attributes)
                for key, name in LEVELS.items():
                    if key in offset:
                        self._levels[name][(query, index)] = float(offset[key])

    def forget(self, query: str) -> None:
        with self._lock:
            for levels in self._levels.values():
                for key in [k for k in levels if k[0] == query]:
                    del levels[key]


class AckbridgeMetricsListener(StreamingQueryListener):
    """A ``StreamingQueryListener`` recording every progress event (see the module doc)."""

    def __init__(self, meter_provider: Any = None) -> None:
        self.metrics = ProgressMetrics(meter_provider)
        self._names: dict[str, str] = {}

    def onQueryStarted(self, event: Any) -> None:
        self._names[str(event.id)] = str(event.name or event.id)

    def onQueryProgress(self, event: Any) -> None:
        self.metrics.record(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        name = self._names.pop(str(event.id), str(event.id))
        self.metrics.forget(name)
