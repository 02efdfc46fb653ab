"""SIGKILL the driver mid-batch, restart from the checkpoint: lost = 0, duplicates reported."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .cells import SOURCE_SIGKILL
from .helpers import Broker, broker_params, eventually, ids_per_cell, runner_is_ours, scoreboard, spark_cell

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JOB = str(Path(__file__).with_name("job_stream_to_parquet.py"))


def run_job(broker: Broker, queue: str, tmp: Path, block_at: int, batch: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    args = [sys.executable, JOB, broker.url(), queue, str(tmp / "ck"), str(tmp / "out"), str(block_at),
            str(tmp / "blocked"), str(batch)]
    # Its own process group: the driver, its JVM and Python workers die together.
    # The child holds its own copy of the log's descriptor: ours is closed once it started.
    with open(tmp / f"job-{block_at}.log", "wb") as log:
        return subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)


def restart_and_read(broker: Broker, queue: str, tmp: Path, batch: int) -> tuple[list[str], int]:
    """Run the job again to the queue's end (AvailableNow); the ids in its Parquet output
    (every run's, in order) and how many of those rows were flagged redelivered."""
    import pyarrow.parquet as pq

    restart = run_job(broker, queue, tmp, block_at=-1, batch=batch)
    try:
        assert restart.wait(400) == 0, (tmp / "job--1.log").read_text()[-3000:]
    finally:
        if restart.poll() is None:
            os.killpg(restart.pid, signal.SIGKILL)
    tables = [pq.read_table(p).to_pydict() for p in sorted((tmp / "out").glob("*.parquet"))]
    return ([m for t in tables for m in t["message_id"]],
            sum(bool(r) for t in tables for r in t["redelivered"]))


@spark_cell("spark source", SOURCE_SIGKILL)
@pytest.mark.parametrize("fault_broker", broker_params(SOURCE_SIGKILL), indirect=True)
def test_driver_sigkilled_mid_batch(cell: None, fault_broker: Broker, tmp_path: Path) -> None:

    broker = fault_broker
    n = ids_per_cell(150)
    batch = max(25, n // 6)
    queue = broker.new_queue()
    confirmed = broker.publish(queue, n)
    (tmp_path / "out").mkdir()
    job = run_job(broker, queue, tmp_path, block_at=2, batch=batch)
    try:
        eventually(lambda: (tmp_path / "blocked").exists() or job.poll() is not None, 180,
                   message="job blocked inside batch 2")
        assert job.poll() is None, (tmp_path / "job-2.log").read_text()[-3000:]
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    # The killed runner's leases return to the queue (broker-side reclaim).
    delivered, redelivered = restart_and_read(broker, queue, tmp_path, batch)
    row = scoreboard(broker.name, SOURCE_SIGKILL, confirmed, delivered, attempted=[f"m-{i}" for i in range(n)],
                     redelivered=redelivered)
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    eventually(lambda: broker.counts(queue) == (0, 0), 60, message="queue drained and settled")


def test_driver_sigkilled_while_batches_go_as_local_files(tmp_path: Path) -> None:
    """Batches over 1 MiB in local mode go to their tasks as files (push/local_files.py). A
    driver killed inside such a batch loses nothing, and the next runner removes the killed
    runner's directory (message bodies) from the temporary folder."""
    import tempfile

    import ackbridge
    from ackbridge_spark.push.local_files import MARK, MIN_FILE_BYTES, PREFIX, runner_pid

    from .helpers import LocalBroker

    broker = LocalBroker(tmp_path)
    try:
        queue = broker.new_queue()
        batch, n = 40, 200
        body = b"k" * (MIN_FILE_BYTES // batch + 2048)
        ids = [f"m-{i}" for i in range(n)]
        with ackbridge.connect(broker.url()) as producer:
            for mid in ids:
                producer.publish(queue, mid.encode() + body, message_id=mid)
            assert producer.flush(timeout=60)
        temp = Path(tempfile.gettempdir())
        before = set(temp.glob(f"{PREFIX}*"))
        (tmp_path / "out").mkdir()
        job = run_job(broker, queue, tmp_path, block_at=3, batch=batch)
        try:
            eventually(lambda: (tmp_path / "blocked").exists() or job.poll() is not None, 180,
                       message="job blocked inside batch 3")
            assert job.poll() is None, (tmp_path / "job-3.log").read_text()[-3000:]
            left = [d for d in set(temp.glob(f"{PREFIX}*")) - before if (d / MARK).exists() and runner_is_ours(d.name)]
            assert left, "the killed runner made no directory: no batch went as a file"
            # The source runner is a child of pyspark's daemon, which has a process group of
            # its own: it would outlive the job's group and clean up as it exits. Killed first
            # (its pid is in its directory's name), it leaves the directory, as a crashed host would.
            for runner in {runner_pid(d.name) for d in left}:
                assert runner is not None
                os.kill(runner, signal.SIGKILL)
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        assert all(d.exists() for d in left)  # a killed runner cannot clean up
        delivered, redelivered = restart_and_read(broker, queue, tmp_path, batch)
        row = scoreboard(broker.name, "driver SIGKILL inside a batch sent as a local file", ids, delivered,
                         redelivered=redelivered)
        assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
        eventually(lambda: broker.counts(queue) == (0, 0), 60, message="queue drained and settled")
        assert not any(d.exists() for d in left), "the killed runner's directory is still there"
    finally:
        broker.close()
