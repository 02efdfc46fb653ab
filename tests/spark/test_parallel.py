"""parallelism=N: N reader processes with a broker connection each, >= N partitions
per batch, each reader settling on its own connection after commit; LOST = 0
under the at-least-once faults."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import RabbitBroker, eventually, make_spark, removed_once_its_runner_is_gone, runner_is_ours, scoreboard

pytestmark = [pytest.mark.spark, pytest.mark.rabbitmq, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-parallel-readers")
    yield session
    session.stop()


class Batches:
    def __init__(self, fail_batch: int | None = None) -> None:
        self.ids: list[str] = []
        self.partitions: list[tuple[int, int]] = []  # (rows, partitions) of each non-empty batch
        self.lock = threading.Lock()
        self.fail_batch = fail_batch

    def __call__(self, df: Any, batch_id: int) -> None:
        ids = [r.message_id for r in df.select("message_id").collect()]
        parts = df.rdd.getNumPartitions()
        with self.lock:
            self.ids.extend(ids)
            if ids:
                self.partitions.append((len(ids), parts))
        if self.fail_batch is not None and batch_id == self.fail_batch:
            raise RuntimeError("sink failure injected by the test")

    def unique(self) -> set[str]:
        with self.lock:
            return set(self.ids)


def connections_through(rabbit: RabbitBroker) -> int:
    """Connections the broker holds whose peer is the test's proxy (this query's readers)."""
    assert rabbit._proxy is not None
    ports = {str(p) for p in rabbit._proxy.upstream_ports()}
    out = subprocess.run(["rabbitmqctl", "-q", "list_connections", "peer_port", "state"],
                         capture_output=True, text=True, timeout=60).stdout
    return sum(1 for line in out.splitlines() if line.split()[:1] and line.split()[0] in ports)


def start(spark: Any, url: str, queue: str, tmp_path: Path, sink: Any, **options: str) -> Any:
    reader = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
              .option("parallelism", "2").option("maxRecordsPerBatch", "60"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()


def test_two_readers_two_connections_two_partitions(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    import tempfile

    from ackbridge_spark.push.local_files import PREFIX

    queue = rabbit.new_queue()
    url = rabbit.cut_url()
    confirmed = rabbit.publish(queue, 400)
    seen = Batches()
    temp = Path(tempfile.gettempdir())
    before = set(temp.glob(f"{PREFIX}*"))
    query = start(spark, url, queue, tmp_path, seen)
    try:
        eventually(lambda: connections_through(rabbit) == 2, 60, message="two broker connections")
        eventually(lambda: set(confirmed) <= seen.unique(), 120, message="every id delivered")
        eventually(lambda: rabbit.counts(queue) == (0, 0), 60, message="settled after commit")
        assert connections_through(rabbit) == 2
        # The readers' files: in a directory named by the runner's pid, so that it is removed
        # at stop or, when Spark killed the runner first, by the next runner (push/local_files.py).
        files = [d for d in set(temp.glob(f"{PREFIX}*")) - before if runner_is_ours(d.name)]
        assert files and all((d / "reader-0").is_dir() for d in files), files
    finally:
        query.stop()
    print("PARTITIONS (rows, partitions) per batch:", seen.partitions)
    assert seen.partitions and all(parts >= 2 for rows, parts in seen.partitions if rows >= 2), seen.partitions
    eventually(lambda: connections_through(rabbit) == 0, 30, message="readers closed on stop")
    removed_once_its_runner_is_gone(files)


def test_parallel_readers_connection_cut_loses_nothing(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    queue = rabbit.new_queue()
    url = rabbit.cut_url()
    seen = Batches()
    query = start(spark, url, queue, tmp_path, seen)
    try:
        confirmed = rabbit.publish(queue, 300)
        eventually(lambda: len(seen.unique()) >= 100, 120, message="first batches in")
        rabbit.sever_from_outside()  # both readers' connections closed by the broker
        confirmed += rabbit.publish(queue, 300, prefix="n")
        eventually(lambda: set(confirmed) <= seen.unique(), 180, message="every id delivered after the cut")
        eventually(lambda: rabbit.counts(queue) == (0, 0), 60, message="settled")
    finally:
        query.stop()
    attempted = [f"m-{i}" for i in range(300)] + [f"n-{i}" for i in range(300)]
    row = scoreboard(rabbit.name, "connection cut (parallelism=2)", confirmed, seen.ids, attempted=attempted)
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0


def test_parallel_readers_sink_failure_then_restart(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    queue = rabbit.new_queue()
    confirmed = rabbit.publish(queue, 300)
    first = Batches(fail_batch=1)
    query = start(spark, rabbit.url(), queue, tmp_path, first)
    with pytest.raises(Exception, match="sink failure injected"):
        query.awaitTermination(120)
    second = Batches()
    query = start(spark, rabbit.url(), queue, tmp_path, second)
    try:
        eventually(lambda: set(confirmed) <= set(first.ids) | second.unique(), 180, message="every id delivered")
        eventually(lambda: rabbit.counts(queue) == (0, 0), 60, message="settled")
    finally:
        query.stop()
    row = scoreboard(rabbit.name, "sink fails once (parallelism=2)", confirmed, first.ids + second.ids,
                     attempted=[f"m-{i}" for i in range(300)])
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0


def test_parallel_readers_never_show_the_password(spark: Any, tmp_path: Path, capsys: Any) -> None:
    import json

    import psutil

    from .helpers import LocalBroker

    canary = "canary-Pw-9e1f"
    broker = LocalBroker(tmp_path)
    try:
        queue = broker.new_queue()
        broker.publish(queue, 40)
        url, _ = broker.secret_url(canary)
        frame = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
                 .option("parallelism", "2").option("maxRecordsPerBatch", "10").load())
        frame.explain(True)
        seen = Batches()
        query = frame.writeStream.foreachBatch(seen).option("checkpointLocation", str(tmp_path / "ck")).start()
        try:
            eventually(lambda: len(seen.unique()) == 40, 120, message="all delivered")
            readers = [p for p in psutil.process_iter(["cmdline"])
                       if "ackbridge_spark.push.reader_process" in " ".join(p.info["cmdline"] or [])]
            assert len(readers) >= 2
            cmdlines = " ".join(" ".join(p.info["cmdline"] or []) for p in readers)
            progress = json.dumps(list(query.recentProgress), default=str)
        finally:
            query.stop()
        texts = {"explain": capsys.readouterr().out, "progress": progress, "reader command lines": cmdlines}
        for path in (tmp_path / "ck").rglob("*"):
            if path.is_file():
                texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
        assert [where for where, text in texts.items() if canary in text] == []
    finally:
        broker.close()
