"""The streaming source: settle after commit, faults, admission control, secrets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cells import SOURCE_CUT, SOURCE_FAILS_ONCE
from .helpers import (
    Broker,
    broker_params,
    eventually,
    ids_per_cell,
    make_spark,
    removed_once_its_runner_is_gone,
    runner_is_ours,
    scoreboard,
    spark_cell,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

CANARY = "canary-Pw-7f3a9c"


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    logs = tmp_path_factory.mktemp("sparklogs")
    session = make_spark("ackbridge-source-tests", {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(logs),
    })
    session.conf.set("ackbridge.test.eventlogdir", str(logs))
    yield session
    session.stop()


class Collector:
    """A foreachBatch sink in the test process: records every row it is given."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.batches: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        columns = ("message_id", "body", "correlation_id", "redelivered", "offset")
        rows = [r.asDict() for r in df.select(*columns).collect()]
        for r in rows:  # MQTT 3.1.1 carries no message id: the tests' bodies are the ids
            body = r.pop("body")
            r["message_id"] = r["message_id"] or bytes(body).decode()
        with self.lock:
            self.rows.extend(dict(r, batch_id=batch_id) for r in rows)
            self.batches.append((batch_id, len(rows)))

    @property
    def ids(self) -> list[str]:
        with self.lock:
            return [r["message_id"] for r in self.rows]


def stream(spark: Any, broker: Broker, queue: str, url: str | None = None, **options: str) -> Any:
    reader = spark.readStream.format("ackbridge").option("url", url or broker.url()).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def source_stats(query: Any) -> dict[str, Any]:
    return _offset_stats(query.lastProgress)


def _offset_stats(progress: dict[str, Any] | None) -> dict[str, Any]:
    if not progress or not progress.get("sources"):
        return {}
    latest = progress["sources"][0].get("latestOffset")
    return json.loads(latest) if isinstance(latest, str) else (latest or {})


def test_unacked_while_sink_blocked_then_settled(spark: Any, broker: Broker, tmp_path: Path) -> None:
    queue = broker.new_queue()
    broker.publish(queue, 10)
    entered, release = threading.Event(), threading.Event()
    seen = Collector()

    def blocking(df: Any, batch_id: int) -> None:
        seen(df, batch_id)
        if batch_id == 0:
            entered.set()
            release.wait(120)

    query = (stream(spark, broker, queue, maxRecordsPerBatch="10").writeStream.foreachBatch(blocking)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        assert entered.wait(120), "first batch never reached the sink"
        # The batch is being written: its messages are delivered, not acked.
        assert eventually(lambda: broker.counts(queue) == (0, 10), 30, message="10 unacked") is True
        release.set()
        eventually(lambda: broker.counts(queue) == (0, 0), 60, message="settled after commit")
    finally:
        release.set()
        query.stop()
    assert sorted(seen.ids) == sorted(f"m-{i}" for i in range(10))


@spark_cell("spark source", SOURCE_FAILS_ONCE)
@pytest.mark.parametrize("mode", ["plain", "wal"], ids=["plain", "write-ahead"])
@pytest.mark.parametrize("fault_broker", broker_params(SOURCE_FAILS_ONCE), indirect=True)
def test_foreach_batch_fails_once_then_restart_delivers_all(cell: None, spark: Any, fault_broker: Broker,
                                                            tmp_path: Path, mode: str) -> None:
    broker, write_ahead = fault_broker, mode == "wal"
    n = ids_per_cell(30)
    queue = broker.new_queue()
    attempted = [f"m-{i}" for i in range(n)]
    confirmed = broker.publish(queue, n)
    options = {"maxRecordsPerBatch": str(max(10, n // 10))}
    if write_ahead:
        options["writeAheadPath"] = str(tmp_path / "wal")
    first = Collector()

    def failing(df: Any, batch_id: int) -> None:
        first(df, batch_id)
        raise RuntimeError("sink failure injected by the test")

    ck = str(tmp_path / "ck")
    query = stream(spark, broker, queue, **options).writeStream.foreachBatch(failing).option(
        "checkpointLocation", ck).start()
    with pytest.raises(Exception, match="sink failure injected"):
        query.awaitTermination(120)
    # Nothing of the failed batch was settled: every message is back on the queue
    # (no publishes since, so the full count proves no ack went out).
    eventually(lambda: broker.counts(queue) == (n, 0), 90, message=f"all {n} back on the queue")

    second = Collector()
    query = stream(spark, broker, queue, **options).writeStream.foreachBatch(second).option(
        "checkpointLocation", ck).start()
    try:
        eventually(lambda: set(confirmed) <= set(second.ids), 300, message="every message delivered")
        eventually(lambda: broker.counts(queue) == (0, 0), 60, message="queue drained and settled")
    finally:
        query.stop()
    row = scoreboard(broker.name, SOURCE_FAILS_ONCE.format(mode=mode), confirmed, second.ids, attempted=attempted)
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    replayed = [r["message_id"] for r in second.rows if r["batch_id"] == 0]
    if write_ahead:
        # Deterministic replay: batch 0 holds exactly what it held the first time.
        assert sorted(replayed) == sorted(first.ids)
        if broker.name != "mqtt-3.1.1":
            # The broker's redeliveries of those messages were acked, not re-emitted
            # (matched by message id, which MQTT 3.1.1 does not carry: declared).
            assert row["duplicated"] == 0
    else:
        assert replayed == []  # a range planned by the dead run is replayed empty


@spark_cell("spark source", SOURCE_CUT)
@pytest.mark.parametrize("fault_broker", broker_params(SOURCE_CUT), indirect=True)
def test_connection_cut_mid_stream(cell: None, spark: Any, fault_broker: Broker, tmp_path: Path) -> None:
    broker = fault_broker
    n = ids_per_cell(100)
    queue = broker.new_queue()
    attempted = [f"m-{i}" for i in range(n)]
    confirmed = broker.publish(queue, n)
    seen = Collector()
    cut = threading.Event()

    def sink(df: Any, batch_id: int) -> None:
        seen(df, batch_id)
        if batch_id == 1 and not cut.is_set():
            cut.set()
            broker.sever_from_outside()

    query = (stream(spark, broker, queue, broker.cut_url(), maxRecordsPerBatch=str(max(20, n // 5)),
                    **broker.sever_options(2))
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        eventually(lambda: set(confirmed) <= set(seen.ids), 300, message="every message delivered")
        eventually(lambda: broker.counts(queue) == (0, 0), 60, message="queue drained and settled")
        stats = eventually(lambda: source_stats(query).get("stale_refused") is not None and source_stats(query),
                           30, message="source stats")
    finally:
        query.stop()
    row = scoreboard(broker.name, SOURCE_CUT, confirmed, seen.ids, attempted=attempted,
                     stale_refused=stats.get("stale_refused"), dropped_stale=stats.get("dropped_stale"))
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    # The cut batch was written, its acks were refused as stale (never applied to
    # redelivered messages), and the broker redelivered it: duplicates, not losses.
    assert stats["stale_refused"] + stats["dropped_stale"] >= 1
    assert row["duplicated"] >= 1


def test_max_records_bound_and_available_now_drains(spark: Any, broker: Broker, tmp_path: Path) -> None:
    queue = broker.new_queue()
    confirmed = broker.publish(queue, 95)
    seen = Collector()
    # prefetch close to the batch size: must not livelock waiting for a commit.
    query = (stream(spark, broker, queue, maxRecordsPerBatch="20", prefetch="25", availableNowIdleMs="500")
             .writeStream.foreachBatch(seen).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "AvailableNow query did not stop"
    assert query.exception() is None
    assert seen.batches and all(n <= 20 for _, n in seen.batches), seen.batches
    row = scoreboard(broker.name, "none (AvailableNow, maxRecordsPerBatch=20)", confirmed, seen.ids)
    assert row["LOST"] == 0 and row["duplicated"] == 0
    eventually(lambda: broker.counts(queue) == (0, 0), 30, message="everything settled")


def test_a_batch_over_max_partition_bytes_is_read_as_several_tasks(spark: Any, broker: Broker,
                                                                   tmp_path: Path) -> None:
    queue = broker.new_queue()
    confirmed = broker.publish(queue, 200)
    seen, tasks = Collector(), []

    def counted(df: Any, batch_id: int) -> None:
        tasks.append(df.rdd.getNumPartitions())
        seen(df, batch_id)

    # ~100 Arrow bytes a row: a 200-row batch is several 4 KiB tasks, still one micro-batch.
    query = (stream(spark, broker, queue, maxRecordsPerBatch="200", maxPartitionBytes="4096",
                    availableNowIdleMs="500")
             .writeStream.foreachBatch(counted).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "AvailableNow query did not stop"
    assert query.exception() is None
    assert max(tasks) > 1, tasks
    assert sorted(seen.ids) == sorted(confirmed)
    eventually(lambda: broker.counts(queue) == (0, 0), 30, message="everything settled")


def test_large_batches_go_to_local_tasks_as_files_and_every_row_arrives_once(spark: Any, broker: Broker,
                                                                              tmp_path: Path) -> None:
    """Local mode: the first large batch travels in its tasks and carries the probe; its task
    runs in the runner's JVM and leaves the mark; later batches of 1 MiB or more go as files
    (push/local_files.py), deleted on commit; their directory is removed at stop or, when
    Spark killed the runner first, by the next runner's sweep."""
    import tempfile

    import ackbridge
    from ackbridge_spark.push.local_files import MARK, MIN_FILE_BYTES, PREFIX

    queue = broker.new_queue()
    per_batch, n = 60, 240
    body = b"z" * (MIN_FILE_BYTES // per_batch + 2048)  # each full batch just over MIN_FILE_BYTES
    ids = [f"f-{i}" for i in range(n)]
    with ackbridge.connect(broker.url()) as producer:
        confirms = [producer.publish(queue, mid.encode() + body, message_id=mid) for mid in ids]
        assert producer.flush(timeout=60)
    assert all(c.result().confirmed for c in confirms)
    before = set(Path(tempfile.gettempdir()).glob(f"{PREFIX}*"))
    seen, marked = Collector(), set()

    def collected(df: Any, batch_id: int) -> None:
        seen(df, batch_id)
        # Other tests' runners (other xdist workers) make directories too: this query's runner
        # is a descendant of this process (its JVM's Python daemon), and its pid is in the name.
        marked.update(d for d in set(Path(tempfile.gettempdir()).glob(f"{PREFIX}*")) - before
                      if (d / MARK).exists() and runner_is_ours(d.name))

    query = (stream(spark, broker, queue, maxRecordsPerBatch=str(per_batch), availableNowIdleMs="500")
             .writeStream.foreachBatch(collected).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "AvailableNow query did not stop"
    assert query.exception() is None
    as_files = max(_offset_stats(p).get("batches_as_files", 0) for p in query.recentProgress)
    assert as_files >= 2, as_files  # 4 full batches: the first carried the probe, the rest went as files
    assert sorted(seen.ids) == sorted(ids)  # every row once
    assert all(r["message_id"] for r in seen.rows)
    eventually(lambda: broker.counts(queue) == (0, 0), 30, message="everything settled")
    assert marked, "no task left the mark in the runner's directory"
    removed_once_its_runner_is_gone(marked)


def test_spark_committed_label_reaches_producer(spark: Any, broker: Broker, tmp_path: Path) -> None:
    import ackbridge

    queue = broker.new_queue()
    seen = Collector()
    with ackbridge.connect(broker.url()) as producer:
        confirms = [producer.publish(queue, f"labelled {i}".encode(), message_id=f"l-{i}",
                                     requested_acks=["spark-committed"], ack_timeout=120) for i in range(5)]
        producer.flush(timeout=60)
        query = (stream(spark, broker, queue, maxRecordsPerBatch="2").writeStream.foreachBatch(seen)
                 .option("checkpointLocation", str(tmp_path / "ck")).start())
        try:
            results = [c.wait_acks(timeout=120) for c in confirms]
        finally:
            query.stop()
    batch_of = {r["correlation_id"]: r["batch_id"] for r in seen.rows}
    for confirm, acks in zip(confirms, results, strict=True):
        assert acks.ok, acks
        label = acks.acks["spark-committed"]
        assert label.payload["batch_id"] == batch_of[confirm.correlation_id]


def test_canary_password_never_shown(spark: Any, broker: Broker, tmp_path: Path, capsys: Any) -> None:
    queue = broker.new_queue()
    broker.publish(queue, 5)
    secret_url, canary = broker.secret_url(CANARY)
    df = (spark.readStream.format("ackbridge").option("url", secret_url).option("queue", queue)
          .option("maxRecordsPerBatch", "5").load())
    df.explain(True)
    explained = capsys.readouterr().out
    seen = Collector()
    ck = tmp_path / "ck"
    query = (df.writeStream.foreachBatch(seen).option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert len(seen.ids) == 5
    progress = json.dumps(list(query.recentProgress), default=str)
    texts = {"explain": explained, "lastProgress": json.dumps(query.lastProgress, default=str), "progress": progress}
    logs = Path(spark.conf.get("ackbridge.test.eventlogdir"))
    for path in [*logs.rglob("*"), *ck.rglob("*")]:
        if path.is_file():
            texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    assert "Physical Plan" in explained
    leaks = [where for where, text in texts.items() if canary in text]
    assert leaks == []
    # A bad option's error (now at load(), before any query starts) must not show the URL either.
    with pytest.raises(Exception) as failure:
        (spark.readStream.format("ackbridge").option("url", secret_url + "?no_such_option=1")
         .option("queue", queue).load())
    assert "no_such_option" in str(failure.value)
    assert canary not in str(failure.value)
