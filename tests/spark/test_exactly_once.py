"""The exactly-once recipe (docs/spark.md): messages with ids, deduplicated by
Spark's state store within a watermark, written by Spark's file sink. After a
driver SIGKILL before a batch commits, or between its commit and its ack, and
after a connection cut: every id exactly once in the table, LOST = 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .helpers import SCOREBOARD_TIER, Broker, eventually, make_broker, scoreboard

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

JOB = str(Path(__file__).with_name("job_exactly_once.py"))
ALL_BROKERS = [pytest.param("embedded", id="embedded"),
               pytest.param("rabbitmq-classic", id="rabbitmq", marks=pytest.mark.rabbitmq),
               pytest.param("mqtt-5", id="mqtt-5", marks=pytest.mark.mqtt),
               pytest.param("amqp10", id="amqp10", marks=pytest.mark.amqp10),
               pytest.param("nats", id="nats", marks=pytest.mark.nats)]


def brokers(*in_ci: str) -> list[Any]:
    """``eo_broker`` params of one test. Each cell costs 60-100 s on 2 cores (two driver
    start-ups): CI runs each fault on the brokers named here, the scoreboard tier
    (``python -m tests.scoreboard.run --spark``) on every broker."""
    return [p for p in ALL_BROKERS if SCOREBOARD_TIER or p.id in in_ci]


@pytest.fixture
def eo_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    b = make_broker(request.param, tmp_path)
    yield b  # type: ignore[misc]
    b.close()


#: Per broker, options every job of a test gets. NATS JetStream redelivers what a dead
#: consumer held only after ack_wait (30 s by default): shorter here, and the restart's
#: AvailableNow waits longer than that before it calls the queue drained.
BROKER_OPTIONS: dict[str, dict[str, str | None]] = {
    "nats": {"ack_wait": "5", "availableNowIdleMs": "9000"},
    # The stream source's AvailableNow ends at the logs' ends: it has no idle timeout (None removes it).
    "rabbitmq-stream": {"availableNowIdleMs": None},
}


def job(url: str, queue: str, tmp: Path, name: str, *, block_id: str = "-", trigger_s: float = 0.0,
        batch: int = 100, options: dict[str, str | None] | None = None) -> subprocess.Popen[bytes]:
    options = {**BROKER_OPTIONS.get(url.split(":", 1)[0], {}), **(options or {})}
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               ACKBRIDGE_JOB_OPTIONS=json.dumps(options or {}))
    args = [sys.executable, JOB, url, queue, str(tmp / "ck"), str(tmp / "table"), block_id, str(tmp / "blocked"),
            str(batch), str(trigger_s)]
    # The child holds its own copy of the log's descriptor: ours is closed once it started.
    with open(tmp / f"job-{name}.log", "wb") as log:
        return subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def table_ids(tmp: Path) -> list[str]:
    import pyarrow.parquet as pq

    # Spark's file sink: only files its _spark_metadata log committed are part of the
    # table (a killed batch may leave files that no reader of the table sees).
    log = tmp / "table" / "_spark_metadata"
    committed: set[str] = set()
    for entry in sorted(log.iterdir()) if log.exists() else []:
        if entry.name.isdigit() or entry.name.endswith(".compact"):
            for line in entry.read_text().splitlines()[1:]:
                committed.add(urlsplit(json.loads(line)["path"]).path)
    return [m for p in sorted(committed) for m in pq.read_table(p).column("message_id").to_pylist()]


def restart_and_check(broker: Broker, url: str, queue: str, tmp: Path, fault: str, confirmed: list[str],
                      options: dict[str, str | None] | None = None) -> None:
    again = job(url, queue, tmp, "restart", options=options)
    try:
        assert again.wait(400) == 0, (tmp / "job-restart.log").read_text()[-3000:]
    finally:
        kill(again)
    delivered = table_ids(tmp)
    dupes = {k: v for k, v in Counter(delivered).items() if v > 1}
    row = scoreboard(broker.name, fault, confirmed, delivered, role="spark exactly-once",
                     duplicates_in_table=sum(v - 1 for v in dupes.values()))
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    assert dupes == {}, f"{len(dupes)} ids more than once in the table"
    eventually(lambda: broker.counts(queue) == (0, 0), 60, message="queue drained and settled")


def broker_and_readers() -> list[Any]:
    """CI: one reader on the embedded broker, two on RabbitMQ; the scoreboard tier: both on every broker."""
    pairs = [(p, readers) for p in ALL_BROKERS for readers in (1, 2)]
    chosen = pairs if SCOREBOARD_TIER else [(p, r) for p, r in pairs if (p.id, r) in {("embedded", 1), ("rabbitmq", 2)}]
    return [pytest.param(p.values[0], r, id=f"{p.id}-{r}", marks=p.marks) for p, r in chosen]


@pytest.mark.parametrize(("eo_broker", "readers"), broker_and_readers(), indirect=["eo_broker"])
def test_sigkill_before_commit(eo_broker: Broker, tmp_path: Path, readers: int) -> None:
    broker, n = eo_broker, 600
    if readers > 1 and broker.name.startswith("mqtt"):
        pytest.skip("declared: an MQTT topic's session has one reader (parallelism=2 is refused at load())")
    queue = broker.new_queue()
    confirmed = broker.publish(queue, n)
    # parallelism=2: the reader processes are in the driver's process group and die with it.
    first = job(broker.url(), queue, tmp_path, "first", block_id="m-350", options={"parallelism": str(readers)})
    try:
        eventually(lambda: (tmp_path / "blocked").exists() or first.poll() is not None, 240,
                   message="a task blocked before its batch commits")
        assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
    finally:
        kill(first)
    fault = "driver SIGKILL before commit" + (f" (parallelism={readers})" if readers > 1 else "")
    restart_and_check(broker, broker.url(), queue, tmp_path, fault, confirmed, {"parallelism": str(readers)})


@pytest.mark.parametrize("eo_broker", brokers("rabbitmq"), indirect=True)
def test_sigkill_between_commit_and_ack(eo_broker: Broker, tmp_path: Path) -> None:
    """Kill between batch 0's commit and its ack. The window is held open by the data, not
    a clock: the first run gets one batch of messages and acks only in ``commit``
    (``settleOnPlan=false``), which Spark calls for batch 0 when it plans batch 1 -- with
    nothing more to read it plans none. (A 20 s trigger interval did not hold it: Spark
    fires processing-time triggers at multiples of the interval on the wall clock, so a
    batch 0 ending past the next boundary had batch 1 planned, and batch 0 acked, at once.)
    The rest is published after the kill."""
    broker, n, batch = eo_broker, 600, 200
    queue = broker.new_queue()
    confirmed = broker.publish(queue, batch)
    first = job(broker.url(), queue, tmp_path, "first", trigger_s=1.0, batch=batch, options={"settleOnPlan": "false"})
    try:
        eventually(lambda: (tmp_path / "ck" / "commits" / "0").exists() or first.poll() is not None, 240,
                   message="batch 0 committed")
        assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
    finally:
        kill(first)
    # The window was real: batch 0 was committed, and the broker still holds its messages
    # (ready or, on NATS until a consumer pulls again, ack-pending).
    eventually(lambda: sum(broker.counts(queue)) == batch, 60, message="batch 0 committed but not acked")
    confirmed += broker.publish(queue, n - batch, prefix="n")
    restart_and_check(broker, broker.url(), queue, tmp_path, "driver SIGKILL between commit and ack", confirmed)


@pytest.mark.parametrize("eo_broker", brokers("rabbitmq"), indirect=True)
def test_connection_cut(eo_broker: Broker, tmp_path: Path) -> None:
    """RabbitMQ: the broker closes the source's connection (rabbitmqctl close_connection,
    through a proxy); embedded: the source severs itself after batch 2 (fault seam)."""
    broker, n = eo_broker, 600
    queue = broker.new_queue()
    confirmed = broker.publish(queue, n)
    first = job(broker.cut_url(), queue, tmp_path, "first", trigger_s=1.0, batch=100,
                options=broker.sever_options(2))
    try:
        eventually(lambda: (tmp_path / "ck" / "commits" / "1").exists() or first.poll() is not None, 240,
                   message="two batches committed")
        broker.sever_from_outside()
        eventually(lambda: broker.counts(queue) == (0, 0) or first.poll() is not None, 240,
                   message="drained after the cut")
        assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
    finally:
        kill(first)
    restart_and_check(broker, broker.url(), queue, tmp_path, "connection cut", confirmed)


@pytest.mark.rabbitmq
@pytest.mark.stops_shared_broker
def test_rabbitmq_restart(tmp_path: Path) -> None:
    """RabbitMQ stop_app / start_app under a running query (the broker keeps durable
    queues and their messages; the source reconnects)."""
    from tests.rabbitmq.harness import rabbitmqctl

    broker = make_broker("rabbitmq-classic", tmp_path)
    try:
        n = 600
        queue = broker.new_queue()
        confirmed = broker.publish(queue, n)
        first = job(broker.url(), queue, tmp_path, "first", trigger_s=1.0, batch=100)
        try:
            eventually(lambda: (tmp_path / "ck" / "commits" / "1").exists() or first.poll() is not None, 240,
                       message="two batches committed")
            try:
                rabbitmqctl("stop_app")
            finally:
                rabbitmqctl("start_app")  # restore the shared broker whatever happened
            eventually(lambda: broker.counts(queue) == (0, 0) or first.poll() is not None, 240,
                       message="drained after the restart")
            assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
        finally:
            kill(first)
        restart_and_check(broker, broker.url(), queue, tmp_path, "RabbitMQ restart (stop_app/start_app)", confirmed)
    finally:
        broker.close()
