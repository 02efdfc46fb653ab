"""The duration histograms' buckets fit what they measure: milliseconds to minutes.

OpenTelemetry's default boundaries (0, 5, 10 ... 10000) are meant for milliseconds;
ackbridge records seconds, so with them every sub-second confirm or settlement
landed in the first bucket and the histogram could not be read. Real traffic on the
embedded broker records to both histograms; the boundaries are read from what the
SDK's reader exports, the same data a Prometheus or OTLP exporter sends.
"""

from __future__ import annotations

from pathlib import Path

import ackbridge
from tests.observability.conftest import Metrics

HISTOGRAMS = ("ackbridge.confirm.duration", "ackbridge.settle.duration")


def test_every_duration_histogram_resolves_milliseconds_and_reaches_minutes(metrics: Metrics, tmp_path: Path) -> None:
    with ackbridge.connect(f"local://{tmp_path / 'broker.db'}") as conn:
        conn.declare_queue("buckets")
        assert conn.publish("buckets", b"x", message_id="1").result().confirmed
        consumer = conn.consume("buckets")
        delivery = consumer.get(timeout=30.0)
        assert delivery is not None
        delivery.ack()
        consumer.close()
    for name in HISTOGRAMS:
        points = metrics.points(name)
        assert points, f"{name} recorded nothing"
        for point in points:
            bounds = list(point.explicit_bounds)
            assert bounds == sorted(bounds), f"{name}: {bounds}"
            positive = [b for b in bounds if b > 0]
            # OpenTelemetry's default starts 0, 5, 10: its first bucket boundary above
            # zero is 5 s, and one bucket holds every sub-second sample.
            assert positive and positive[0] <= 0.01, f"{name}: first bucket boundary {positive[:1]} s is above 10 ms"
            assert len([b for b in positive if b < 1.0]) >= 5, f"{name}: too few sub-second buckets in {bounds}"
            assert bounds[-1] >= 60.0, f"{name}: last bucket boundary {bounds[-1]} s is under a minute"
