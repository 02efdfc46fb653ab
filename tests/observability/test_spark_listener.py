"""The Spark listener turns progress events' source counters into OTel metrics."""

from __future__ import annotations

import json

from tests.observability.conftest import Metrics


def progress(settled: int, stale: int, buffered: int, rows: int) -> dict[str, object]:
    offset = {"seq": 500, "buffered": buffered, "unsettled": 7, "settled": settled, "stale_refused": stale,
              "labels_sent": 0, "replay_duplicates_acked": 0, "reconnects": 1, "dropped_stale": 2, "data_loss": 0,
              "batches_as_files": 4}
    return {"id": "q-id", "name": "orders", "numInputRows": rows, "durationMs": {"triggerExecution": 250},
            "sources": [{"description": "other", "latestOffset": "{\"offset\": 3}"},
                        {"description": "ackbridge", "latestOffset": json.dumps(offset), "metrics": {}}]}


def test_progress_counters_become_metrics(metrics: Metrics) -> None:
    from ackbridge.observability import _providers
    from ackbridge_spark.metrics_listener import ProgressMetrics

    recorder = ProgressMetrics(_providers.meter_provider())
    recorder.record(progress(settled=100, stale=1, buffered=40, rows=100))
    recorder.record(progress(settled=250, stale=3, buffered=10, rows=150))
    assert metrics.total("ackbridge.spark.settled", ackbridge__spark__query="orders") == 250
    assert metrics.total("ackbridge.spark.stale_refused") == 3
    assert metrics.total("ackbridge.spark.dropped_stale") == 2
    assert metrics.total("ackbridge.spark.reconnects") == 1
    assert metrics.total("ackbridge.spark.batches_as_files") == 4
    assert metrics.total("ackbridge.spark.input_rows") == 250
    assert metrics.total("ackbridge.spark.buffered", ackbridge__spark__source=1) == 10
    assert metrics.total("ackbridge.spark.unsettled") == 7
    assert metrics.count("ackbridge.spark.batch.duration") == 2
    recorder.record(progress(settled=20, stale=0, buffered=0, rows=20))  # the source restarted
    assert metrics.total("ackbridge.spark.settled") == 270


def test_listener_reads_the_event_json(metrics: Metrics) -> None:
    from ackbridge.observability import _providers
    from ackbridge_spark.metrics_listener import AckbridgeMetricsListener

    class Event:
        class progress:
            json = json.dumps(progress(settled=5, stale=0, buffered=0, rows=5))

    listener = AckbridgeMetricsListener(_providers.meter_provider())
    listener.onQueryProgress(Event())
    assert metrics.total("ackbridge.spark.settled") == 5
