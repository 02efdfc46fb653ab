"""What recording metrics (and traces) costs, embedded broker, same run.

Each round does the same publish-with-confirms and consume-with-acks work
(benchmarks/core_bench.py's ``through_core``) four ways, back to back:

- ``transport``: the ``local://`` transport driven directly (core_bench's baseline);
- ``off``: ackbridge with the OpenTelemetry API installed and no SDK provider;
- ``metrics``: an SDK ``MeterProvider`` (InMemoryMetricReader) recording;
- ``metrics+traces``: also a ``TracerProvider`` (spans kept in memory).

Ratios are per round, median over rounds; "off/transport" is the figure to hold
against core_bench's ratio (a venv without the API cannot be timed in this run).

    .venv/bin/python benchmarks/observability_bench.py --n 10000 --rounds 3 --chart docs/observability.png
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from core_bench import direct, through_core
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ackbridge import observability

MODES = ("off", "metrics", "metrics+traces")
#: core_bench's options for the directly driven transport (what connect() gives it).
DIRECT_OPTIONS = {"lease_timeout": 30.0, "fsync": True, "max_message_bytes": 16 << 20, "poll_ms": 20.0}


def run_mode(mode: str, url: str, n: int, window: int, prefetch: int) -> tuple[float, float, float, float]:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader]) if mode != "off" else None
    exporter = InMemorySpanExporter()
    tracers = None
    if mode == "metrics+traces":
        tracers = TracerProvider()
        tracers.add_span_processor(SimpleSpanProcessor(exporter))
    observability.configure(meter_provider=meters, tracer_provider=tracers)
    try:
        return through_core(url, n, window, prefetch)
    finally:
        observability.configure()
        for provider in (meters, tracers):
            if provider is not None:
                provider.shutdown()
        exporter.clear()


def points(reader: InMemoryMetricReader) -> dict[str, float]:
    found: dict[str, float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    name = metric.name
                    if name == "ackbridge.settled":
                        name = f"settled {point.attributes.get('messaging.operation.name')}"
                    value = getattr(point, "value", None)
                    if value is not None:
                        found[name] = found.get(name, 0) + value
    return found


def chart(url: str, n: int, path: str) -> None:
    """One real run sampled every 50 ms: cumulative publishes/settlements, and the
    unconfirmed/unsettled gauges, plotted to *path*."""
    import uuid

    import matplotlib

    import ackbridge

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    observability.configure(meter_provider=meters)
    samples: list[tuple[float, dict[str, float]]] = []
    done = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.monotonic() - start, points(reader)))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    queue = f"chart-{uuid.uuid4().hex[:6]}"
    try:
        with ackbridge.connect(url) as conn:
            publisher = conn.publisher(window=500)
            consumer = conn.consume(queue, prefetch=300)
            for i in range(n):
                publisher.publish(queue, b"x" * 256, message_id=str(i))
                if i % 4 == 3:  # consume at a quarter of the publishing pace, then catch up
                    delivery = consumer.get(timeout=30)
                    assert delivery is not None
                    (delivery.reject if i % 40 == 39 else delivery.ack)()  # one in ten rejected
            publisher.flush()
            for _ in range(n - n // 4):
                delivery = consumer.get(timeout=30)
                assert delivery is not None
                delivery.ack()
            time.sleep(0.2)
    finally:
        done.set()
        sampler.join()
        observability.configure()
    times = [t for t, _ in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for key, label in (("ackbridge.published", "ackbridge.published (confirmed)"),
                       ("settled ack", "ackbridge.settled (ack)"), ("settled reject", "ackbridge.settled (reject)")):
        top.plot(times, [s.get(key, 0) for _, s in samples], label=label)
    top.set_ylabel("messages (cumulative)")
    top.legend(loc="upper left")
    for key in ("ackbridge.unconfirmed", "ackbridge.unsettled"):
        bottom.plot(times, [s.get(key, 0) for _, s in samples], label=key)
    bottom.set_ylabel("messages (gauge)")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper left")
    fig.suptitle(f"ackbridge metrics, embedded broker, {n} messages (InMemoryMetricReader every 50 ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    meters.shutdown()
    final = samples[-1][1]
    print(f"chart: {path}; final counters: published {final.get('ackbridge.published', 0):.0f}, "
          f"acked {final.get('settled ack', 0):.0f}, rejected {final.get('settled reject', 0):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chart", help="also plot a sampled run to this PNG")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"n={args.n}, rounds={args.rounds}, embedded broker (local://, fsync on)")
    rows: dict[str, list[Any]] = {"transport": [], **{m: [] for m in MODES}}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"local://{tmp}/bench.db"  # as core_bench: SQLite WAL, fsync on
        for _ in range(args.rounds):
            rows["transport"].append(direct(url, DIRECT_OPTIONS, args.n, args.window, args.prefetch))
            for mode in MODES:
                rows[mode].append(run_mode(mode, url, args.n, args.window, args.prefetch))
        print(f"{'mode':16} {'publish msg/s':>14} {'consume msg/s':>14} {'pub CPU us':>11} {'con CPU us':>11}")
        for mode, results in rows.items():
            med = [statistics.median(r[i] for r in results) for i in range(4)]
            print(f"{mode:16} {med[0]:14,.0f} {med[1]:14,.0f} {med[2] * 1e6:11.1f} {med[3] * 1e6:11.1f}")
        print("median per-round ratios (throughput; CPU per message as base/mode):")
        for mode, base in (("off", "transport"), ("metrics", "off"), ("metrics+traces", "off")):
            pub = statistics.median(m[0] / b[0] for m, b in zip(rows[mode], rows[base], strict=True))
            con = statistics.median(m[1] / b[1] for m, b in zip(rows[mode], rows[base], strict=True))
            pcpu = statistics.median(b[2] / m[2] for m, b in zip(rows[mode], rows[base], strict=True))
            ccpu = statistics.median(b[3] / m[3] for m, b in zip(rows[mode], rows[base], strict=True))
            print(f"  {mode + '/' + base:26} publish {pub:5.2f}  consume {con:5.2f}  "
                  f"CPU publish {pcpu:5.2f}  CPU consume {ccpu:5.2f}")
        if args.chart:
            chart(url, args.n, args.chart)


if __name__ == "__main__":
    main()
