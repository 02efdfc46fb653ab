"""SIGKILL the driver mid-batch, restart from the checkpoint: lost = 0, duplicates reported."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .cells import SOURCE_SIGKILL
from .helpers import Broker, broker_params, eventually, ids_per_cell, scoreboard, spark_cell

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


@spark_cell("spark source", SOURCE_SIGKILL)
@pytest.mark.parametrize("fault_broker", broker_params(SOURCE_SIGKILL), indirect=True)
def test_driver_sigkilled_mid_batch(cell: None, fault_broker: Broker, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

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
    restart = run_job(broker, queue, tmp_path, block_at=-1, batch=batch)
    try:
        assert restart.wait(400) == 0, (tmp_path / "job--1.log").read_text()[-3000:]
    finally:
        if restart.poll() is None:
            os.killpg(restart.pid, signal.SIGKILL)
    tables = [pq.read_table(p).to_pydict() for p in sorted((tmp_path / "out").glob("*.parquet"))]
    delivered = [m for t in tables for m in t["message_id"]]
    row = scoreboard(broker.name, SOURCE_SIGKILL, confirmed, delivered, attempted=[f"m-{i}" for i in range(n)],
                     redelivered=sum(bool(r) for t in tables for r in t["redelivered"]))
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    eventually(lambda: broker.counts(queue) == (0, 0), 60, message="queue drained and settled")
