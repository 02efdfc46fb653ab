"""Exactly-once by construction: the executor-side stream source into Spark's file sink,
with NO dedupe step, under a driver SIGKILL. The job and the kill are test_exactly_once.py's
(job_exactly_once.py as its own driver process, SIGKILLed with its process group); the
restart replays the batch the dead driver planned -- the same offset ranges, so the same
rows -- and the table must hold every id exactly once."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import eventually, ids_per_cell, scoreboard, spark_cell
from .stream_helpers import STREAM_URL, Streams
from .test_exactly_once import job, kill, table_ids

pytestmark = [pytest.mark.spark, pytest.mark.rabbitmq_streams, pytest.mark.timeout(900)]


@pytest.fixture
def streams() -> Iterator[Streams]:
    made = Streams()
    yield made
    made.close()


@pytest.fixture(autouse=True)
def no_dedupe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACKBRIDGE_JOB_DEDUPE", "0")  # job_exactly_once.py: source -> file sink, nothing between


def _last(directory: Path) -> int:
    found = [int(p.name) for p in directory.iterdir() if p.name.isdigit()] if directory.exists() else []
    return max(found, default=-1)


def _planned(tmp: Path, batch: int) -> dict[str, dict[str, int]]:
    """The end position Spark's offset log holds for *batch* (the source's JSON offset)."""
    return json.loads((tmp / "ck" / "offsets" / str(batch)).read_text().splitlines()[-1])  # type: ignore[no-any-return]


def _restart_and_count(streams: Streams, names: list[str], tmp: Path, fault: str, sent: list[str],
                       options: dict[str, str | None]) -> None:
    again = job(STREAM_URL, ",".join(names), tmp, "restart", options=options)
    try:
        assert again.wait(400) == 0, (tmp / "job-restart.log").read_text()[-3000:]
    finally:
        kill(again)
    delivered = table_ids(tmp)
    dupes = {k: v for k, v in Counter(delivered).items() if v > 1}
    row = scoreboard("rabbitmq-streams", fault, sent, delivered, role="spark source",
                     duplicates_in_table=sum(v - 1 for v in dupes.values()))
    assert row["LOST"] == 0 and row["UNEXPECTED"] == 0
    assert dupes == {}, f"{len(dupes)} ids more than once in the table"
    # After the restart's last batch, the broker holds each stream's end for the reference.
    for name in names:
        eventually(lambda n=name: streams.stored(n) == streams.end(n), 60, message=f"offset of {name} stored")


@pytest.mark.usefixtures("cell")
@pytest.mark.parametrize("fault_broker", ["rabbitmq-streams"])
@spark_cell("spark source", "driver SIGKILL mid-batch + restart (stream source, no dedupe step)")
def test_stream_source_sigkilled_mid_batch_exactly_once(streams: Streams, tmp_path: Path, fault_broker: str) -> None:
    a, b = streams.new(), streams.new()
    n = ids_per_cell(300)  # per stream; the scoreboard tier publishes 1000 to each
    sent = streams.publish(a, n, prefix="a") + streams.publish(b, n, prefix="b")
    options: dict[str, str | None] = {"consumerReference": streams.reference, "minPartitions": "3"}
    first = job(STREAM_URL, f"{a},{b}", tmp_path, "first", block_id="a-250", options=options)
    try:
        eventually(lambda: (tmp_path / "blocked").exists() or first.poll() is not None, 240,
                   message="a task blocked before its batch commits")
        assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
    finally:
        kill(first)
    # The fault hit where it should: a batch planned (in offsets/) but not committed.
    planned, committed = _last(tmp_path / "ck" / "offsets"), _last(tmp_path / "ck" / "commits")
    assert planned == committed + 1 and committed >= 0, (planned, committed)
    # The dead batch had rows to replay, and the broker never got an offset past the committed batch.
    assert _planned(tmp_path, planned) != _planned(tmp_path, committed)
    stored_at_kill = streams.stored(a)
    assert stored_at_kill is None or stored_at_kill <= _planned(tmp_path, committed)[a][a]
    _restart_and_count(streams, [a, b], tmp_path, "driver SIGKILL mid-batch + restart (stream source, no dedupe step)",
                       sent, options)


@pytest.mark.usefixtures("cell")
@pytest.mark.parametrize("fault_broker", ["rabbitmq-streams"])
@spark_cell("spark source", "driver SIGKILL between commit and offset store (stream source, no dedupe step)")
def test_stream_source_sigkilled_between_commit_and_store(streams: Streams, tmp_path: Path, fault_broker: str) -> None:
    """The broker's offset lags the checkpoint: batch 0 is committed in Spark and its offset
    not stored on the broker when the driver dies; the restart must follow the checkpoint.

    The window is held open by the data, not by a clock: the first run sees exactly one
    batch of records and stores offsets only in ``commit`` (``settleOnPlan=false``), which
    Spark calls for batch 0 when it plans batch 1 -- and with nothing more to read it plans
    none. (A long trigger interval did not hold it: Spark fires processing-time triggers
    at multiples of the interval on the wall clock, not an interval after the last batch
    began, so batch 0 could end after the next boundary and batch 1's plan store its
    offset, 200, before the kill.) The rest is published after the kill."""
    a = streams.new()
    total, batch = ids_per_cell(600), 200
    sent = streams.publish(a, batch, prefix="m")
    first_options: dict[str, str | None] = {"consumerReference": streams.reference, "settleOnPlan": "false"}
    first = job(STREAM_URL, a, tmp_path, "first", trigger_s=1.0, batch=batch, options=first_options)
    try:
        eventually(lambda: (tmp_path / "ck" / "commits" / "0").exists() or first.poll() is not None, 240,
                   message="batch 0 committed")
        assert first.poll() is None, (tmp_path / "job-first.log").read_text()[-3000:]
    finally:
        kill(first)
    assert _last(tmp_path / "ck" / "commits") == _last(tmp_path / "ck" / "offsets") == 0
    assert _planned(tmp_path, 0)[a][a] == batch
    assert streams.stored(a) in (None, 0)  # committed in Spark, not stored on the broker
    sent += streams.publish(a, total - batch, prefix="n")
    options: dict[str, str | None] = {"consumerReference": streams.reference}
    _restart_and_count(streams, [a], tmp_path, "driver SIGKILL between commit and offset store "
                       "(stream source, no dedupe step)", sent, options)
