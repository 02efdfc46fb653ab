"""The sink under faults, on every broker: a refused publish, a connection cut in the
middle of a write, a task that fails after publishing. Spark retries tasks
(``local[2,4]``: up to 4 attempts).

A plain consumer drains the queue while Spark writes (MQTT drops an offline
backlog beyond 1000) and the checker counts: every row the sink reported
written (the write succeeded) must be on the broker (LOST = 0), nothing else
(UNEXPECTED = 0); duplicates are counted (a retried task republishes its rows
with the same message ids).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import AckbridgeError

from .cells import SINK_CUT, SINK_REFUSED, SINK_TASK_FAILS
from .helpers import Broker, broker_params, eventually, ids_per_cell, make_spark, scoreboard, spark_cell

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

PAD = b"x" * 200  # rows of ~220 bytes, so a byte-counted cut lands among the publishes


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-sink-fault-tests", master="local[2,4]")
    yield session
    session.stop()


def row_id(message_id: str | None, body: bytes) -> str:
    # MQTT 3.1.1 carries no message id: the body starts with it.
    return message_id or body.split(b" ", 1)[0].decode()


class Drainer:
    """A plain consumer acking everything the queue holds, from before the write until quiet."""

    def __init__(self, broker: Broker, queue: str) -> None:
        self.broker, self.queue = broker, queue
        self.ids: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.last_at = time.monotonic()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sink-drainer", daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "drainer did not subscribe"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with ackbridge.connect(self.broker.url()) as conn, conn.consume(self.queue, prefetch=200) as consumer:
                    self._ready.set()
                    while not self._stop.is_set():
                        delivery = consumer.get(timeout=0.2)
                        if delivery is None:
                            continue
                        with self.lock:
                            self.ids[row_id(delivery.message_id, delivery.body)] += 1
                            self.last_at = time.monotonic()
                        delivery.ack()
                    consumer.flush()
            except AckbridgeError as exc:  # reconnect; unacked ones come back (counted as duplicates)
                self.errors.append(type(exc).__name__)
                self._ready.set()

    def seen(self) -> set[str]:
        with self.lock:
            return set(self.ids)

    def finish(self, expected: set[str], quiet: float = 2.0, timeout: float = 120.0) -> list[str]:
        """Wait for every expected id, then until nothing new arrived for *quiet* s."""
        eventually(lambda: expected <= self.seen(), timeout, message="every written row drained")
        eventually(lambda: time.monotonic() - self.last_at >= quiet, timeout, message="queue quiet")
        self._stop.set()
        self._thread.join(30)
        with self.lock:
            return list(self.ids.elements())


def frame(spark: Any, ids: list[str], target: str, special: dict[int, tuple[str | None, bytes | None]]) -> Any:
    """Rows (body, message_id, topic) in 2 partitions; *special* overrides a row's destination/body."""
    rows = []
    for i, mid in enumerate(ids):
        dest, body = special.get(i, (None, None))
        rows.append((body or mid.encode() + b" " + PAD, mid, dest or target))
    return spark.createDataFrame(rows, "body binary, message_id string, topic string").repartition(2)


def save(df: Any, url: str, target: str, options: dict[str, str]) -> None:
    writer = df.write.format("ackbridge").option("url", url).option("queue", target)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


@spark_cell("spark sink", SINK_REFUSED)
@pytest.mark.parametrize("fault_broker", broker_params(SINK_REFUSED), indirect=True)
def test_refused_publish_then_rewrite(cell: None, spark: Any, fault_broker: Broker) -> None:
    broker = fault_broker
    n = ids_per_cell(40)
    queue = broker.new_queue()
    target = broker.target(queue)
    ids = [f"s-{i}" for i in range(n)]
    refused_at = n // 2
    dest, options, body = broker.refused_destination(queue)
    drainer = Drainer(broker, queue)
    # One row the broker refuses: its task fails on every attempt, the write fails.
    with pytest.raises(Exception, match="not confirmed") as failure:
        save(frame(spark, ids, target, {refused_at: (dest, body)}), broker.url(), target, options)
    assert "refused" in str(failure.value)
    time.sleep(1.0)  # what the failed write confirmed reaches the drainer; the refused row must not
    assert ids[refused_at] not in drainer.seen()
    # The application fixes the row (or the limit) and writes again: now every row is reported written.
    save(frame(spark, ids, target, {}), broker.url(), target, {})
    delivered = drainer.finish(set(ids))
    row = scoreboard(broker.name, SINK_REFUSED, ids, delivered, attempted=ids, role="spark sink")
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0


@spark_cell("spark sink", SINK_CUT)
@pytest.mark.parametrize("fault_broker", broker_params(SINK_CUT), indirect=True)
def test_connection_cut_mid_write(cell: None, spark: Any, fault_broker: Broker) -> None:
    broker = fault_broker
    n = ids_per_cell(40)
    queue = broker.new_queue()
    target = broker.target(queue)
    ids = [f"s-{i}" for i in range(n)]
    url, proxy = broker.proxied_url()
    options: dict[str, str] = {}
    if proxy is None:
        options["testSeverAfterRows"] = str(max(1, n // 4))  # the embedded broker has no socket to cut
    else:
        # Let the connections open and about a quarter of the rows through, then reset both.
        proxy.reset_after(3000 + n * 60)
    drainer = Drainer(broker, queue)
    try:
        save(frame(spark, ids, target, {}), url, target, options)
        cut_fired = proxy is None or proxy.connections_seen > 2
    finally:
        if proxy is not None:
            proxy.close()
    delivered = drainer.finish(set(ids))
    row = scoreboard(broker.name, SINK_CUT, ids, delivered, attempted=ids, role="spark sink")
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    assert cut_fired, "the cut never happened (no connection after the first two)"


@spark_cell("spark sink", SINK_TASK_FAILS)
@pytest.mark.parametrize("fault_broker", broker_params(SINK_TASK_FAILS), indirect=True)
def test_task_fails_after_publishing_then_retry(cell: None, spark: Any, fault_broker: Broker) -> None:
    broker = fault_broker
    n = ids_per_cell(40)
    queue = broker.new_queue()
    target = broker.target(queue)
    ids = [f"s-{i}" for i in range(n)]
    drainer = Drainer(broker, queue)
    # Each task's first attempt publishes a quarter of the rows, waits for their
    # confirms and raises; Spark's retry republishes the partition (same ids).
    save(frame(spark, ids, target, {}), broker.url(), target, {"testFailAfterRows": str(max(1, n // 4))})
    delivered = drainer.finish(set(ids))
    row = scoreboard(broker.name, SINK_TASK_FAILS, ids, delivered, attempted=ids, role="spark sink")
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    assert row["duplicated"] >= 1, "the failed attempts' confirmed rows should come back as duplicates"
