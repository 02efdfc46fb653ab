"""NATS JetStream with ``fetch=executors``: executor tasks fetch, the driver acks after
commit (docs/spark.md). Asserted on what the server holds: the durable consumer's
``num_pending`` and ``num_ack_pending`` (JetStream consumer info, through nats-py's
management API on the harness's own connection)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import Broker, HarnessBroker, eventually, make_broker, make_spark
from .test_exactly_once import job, kill, restart_and_check

pytestmark = [pytest.mark.spark, pytest.mark.nats, pytest.mark.timeout(240)]

#: Every job of the fault test: executor fetch, and none of the driver-side source's AvailableNow idle wait.
FETCH: dict[str, str | None] = {"fetch": "executors", "minPartitions": "2", "availableNowIdleMs": None}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-jetstream-fetch-tests")
    yield session
    session.stop()


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[HarnessBroker]:
    b = make_broker("nats", tmp_path)  # fails in CI, skips locally without nats-server on 4222
    assert isinstance(b, HarnessBroker)
    try:
        yield b
    finally:
        b.close()  # deletes this run's streams (unique subjects per run)


def server_holds(broker: HarnessBroker, queue: str) -> tuple[int, int]:
    """(num_pending, num_ack_pending) of the durable, as nats-server reports them."""
    info = broker.harness.consumer_info(queue)
    return int(info.num_pending or 0), int(info.num_ack_pending or 0)


class Batches:
    """A foreachBatch sink: each batch's ids, partition count and partition ids."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.batches: list[tuple[int, int, int, set[int]]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        partitions = df.rdd.getNumPartitions()
        rows = df.select("message_id", F.spark_partition_id().alias("pid")).collect()
        with self.lock:
            self.ids.extend(r["message_id"] for r in rows)
            self.batches.append((batch_id, len(rows), partitions, {r["pid"] for r in rows}))


def test_executors_fetch_and_the_driver_acks_after_commit(spark: Any, nats: HarnessBroker, tmp_path: Path) -> None:
    queue = nats.new_queue()
    sent = nats.publish(queue, 300)
    assert len(sent) == 300 and server_holds(nats, queue) == (300, 0)
    seen = Batches()
    df = (spark.readStream.format("ackbridge").option("url", nats.url()).option("queue", queue)
          .option("fetch", "executors").option("minPartitions", "2").option("maxRecordsPerBatch", "100")
          .option("writeAheadPath", str(tmp_path / "fetch")).load())
    query = (df.writeStream.foreachBatch(seen).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        eventually(lambda: len(set(seen.ids)) >= 300 or query.exception() is not None, 180,
                   message="every id in the sink")
        assert query.exception() is None
        # The last batch is acked at the next trigger (settleOnPlan): then the server holds nothing.
        eventually(lambda: server_holds(nats, queue) == (0, 0), 60, message="nothing pending or ack-pending")
    finally:
        query.stop()
    assert set(seen.ids) == set(sent)
    dupes = {k: n for k, n in Counter(seen.ids).items() if n > 1}
    assert dupes == {}, f"{len(dupes)} ids delivered twice without a fault"
    with_rows = [b for b in seen.batches if b[1]]
    assert with_rows and all(partitions >= 2 for _, _, partitions, _ in with_rows), seen.batches
    # Each task fetches at most its share (50): a full batch came from both tasks.
    assert all(len(pids) >= 2 for _, rows, _, pids in with_rows if rows > 50), seen.batches
    assert server_holds(nats, queue) == (0, 0)  # after the stop too: nothing was -NAKed back or left
    assert nats.harness.stream_messages(queue) == 0  # work-queue stream: acked messages are removed
    # Acked batches' folders are removed (at most the last planned one, never committed, is left).
    assert len(list((tmp_path / "fetch").glob("batch-*"))) <= 1


def test_driver_sigkill_mid_batch_then_restart_loses_nothing(nats: HarnessBroker, tmp_path: Path) -> None:
    """job_exactly_once.py (source -> dedupe on message_id -> Parquet) SIGKILLed with its process
    group while a task of a fetched batch blocks; the restart (AvailableNow, same checkpoint)
    replays that batch from its part files, acks it, fetches the rest. LOST 0."""
    broker: Broker = nats
    queue = broker.new_queue()
    confirmed = broker.publish(queue, 600)
    options = {**FETCH, "writeAheadPath": str(tmp_path / "fetch")}
    first = job(broker.url(), queue, tmp_path, "first", block_id="m-350", options=options)
    try:
        eventually(lambda: (tmp_path / "blocked").exists() or first.poll() is not None, 120,
                   message="a task blocked before its batch commits")
        assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
    finally:
        kill(first)
    # The dead batch's deliveries were left pending by its tasks (not -NAKed), and its parts are on disk.
    assert server_holds(nats, queue)[1] > 0
    dead = {p.parent.parent for p in (tmp_path / "fetch").glob("batch-*/part-*/acks")}
    assert dead
    restart_and_check(broker, broker.url(), queue, tmp_path,
                      "driver SIGKILL mid-batch (NATS executor fetch, driver acks after commit)", confirmed, options)
    assert server_holds(nats, queue) == (0, 0)
    # The restarted driver replayed the dead batch from its part files and acked their handles.
    assert not any(folder.exists() for folder in dead)


@pytest.mark.parametrize(("given", "expected"), [
    ({"url": "local:///tmp/x.db", "fetch": "executors"}, "fetch=executors needs a broker whose acks any connection"),
    ({"fetch": "executor"}, "'fetch' must be 'driver'"),
    ({"fetch": "executors", "prefetch": "10"}, "'prefetch' does not apply to fetch=executors"),
    ({"fetch": "executors", "parallelism": "2"}, "use minPartitions"),
    ({"fetch": "executors", "maxPartitionBytes": "4096"}, "'maxPartitionBytes' does not apply to fetch=executors"),
    ({"fetch": "executors", "localFiles": "false"}, "'localFiles' does not apply to fetch=executors"),
    ({"fetch": "executors", "minPartitions": "0"}, "'minPartitions' must be >= 1"),
    ({"fetch": "executors", "ack_wiat": "5"}, "did you mean 'ack_wait'"),
    ({"fetchIdleMs": "100"}, "is for fetch=executors"),
])
def test_options_are_checked_at_load(given: dict[str, str], expected: str) -> None:
    from ackbridge.errors import InvalidOptionError
    from ackbridge_spark.datasource import AckbridgeDataSource

    options = {"url": "nats://app:s3cret-Pw@127.0.0.1:4222", "queue": "orders", **given}
    with pytest.raises(InvalidOptionError, match=expected) as caught:
        AckbridgeDataSource(options).schema()
    assert "s3cret-Pw" not in str(caught.value)


def test_no_password_in_options_or_tasks() -> None:
    from ackbridge_spark.fetch.options import parse_fetch
    from ackbridge_spark.fetch.task import FetchTask

    opts = parse_fetch({"url": "nats://app:s3cret-Pw@127.0.0.1:4222", "queue": "orders", "fetch": "executors",
                        "minPartitions": "3", "maxRecordsPerBatch": "100"})
    assert opts.share == 34 and opts.connect_kwargs()["max_ack_pending"] == 200
    shown = repr(opts) + repr(FetchTask(0, 1, opts.share, "/tmp/f"))
    assert "s3cret-Pw" not in shown


def test_the_first_attempt_to_finish_claims_a_part(tmp_path: Path) -> None:
    """Two attempts of one part (a retry racing a slow first one, speculation): the first
    claim wins, the second gets its rows, and the handles on disk are the winner's."""
    from ackbridge_spark.fetch import files as fetch_files

    directory = str(tmp_path)
    assert fetch_files.plan(directory, 7, 2, 0o600) == 2
    assert fetch_files.plan(directory, 7, 5, 0o600) == 2  # a replay keeps the planned task count
    assert fetch_files.read_rows(directory, 7, 0) is None
    assert fetch_files.claim_part(directory, 7, 0, b"rows-a", ["$JS.ACK.a"], 0o600)
    assert not fetch_files.claim_part(directory, 7, 0, b"rows-b", ["$JS.ACK.b"], 0o600)
    assert fetch_files.read_rows(directory, 7, 0) == b"rows-a"
    assert fetch_files.read_handles(directory, 7, 0) == ["$JS.ACK.a"]
    assert [p.name for p in (tmp_path / fetch_files.batch_dir("", 7)).iterdir()] in (
        ["plan.json", "part-00000"], ["part-00000", "plan.json"])  # no attempt folder left behind
    assert fetch_files.batches_through(directory, 7) == [7] and fetch_files.batches_through(directory, 6) == []
    fetch_files.remove_batch(directory, 7)
    assert fetch_files.batches_through(directory, 7) == []
