"""Retention under a replayed batch of the stream source (issue 32, finding 3).

A query plans its first batch -- offsets [0, 500) of a RabbitMQ stream -- and
dies before the batch commits, in one of two ways (``fault``): its foreachBatch
sink raises (``sink-raises``, one in-process session), or its driver is SIGKILLed
with its process group while a task of batch 0 is blocked (``driver-sigkill``:
``tests/spark/job_exactly_once.py`` as its own driver process, into Spark's file
sink, the restart an AvailableNow run of the same job). Both leave the checkpoint
the same way: ``offsets/0`` without ``commits/0``. Retention then
removes the head of the stream (small segments, ``max-length-bytes``, more records
published). The restarted query replays [0, 500) from the checkpoint, which Spark
hands a fresh runner through ``partitions(start, end)`` without a ``latestOffset`` call.

The start of batch 0 is not in the checkpoint: Spark asks ``initialOffset`` for it
again on a replay. Before the fix that answered the log's first offset *now*, so
the replayed batch held only the records that survived, and nothing said so:
``data_loss`` 0, no log line, no failure with ``failOnDataLoss=true``. Now the
first attempt stores each start under ``consumerReference`` before it plans batch 0
(a start of 0, as here, RabbitMQ does not store: a replay that finds none starts at
0), so the replay plans the same range, and the offsets retention removed from it
are data loss: counted in ``data_loss`` and logged at WARNING on ``ackbridge.spark``
(``failOnDataLoss=false``), or the query fails naming the range.

Score row: attempted / confirmed = the ids published (one per offset: nothing
else is written to the stream before the cut); delivered = ids in the sink;
LOST = ids neither delivered nor covered by the loss the source reported (a
silent loss); error = the reported count differing from what retention removed.
The in-process query reports its count in ``data_loss``; the killed job's restart is
a driver process of its own whose progress the test cannot read, so there the loss
reported is the offsets its WARNING lines name (``offsets [a, b) of 'stream'``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackbridge.transport.offset_log import open_offset_log
from tests.conftest import require_port
from tests.scoreboard.checker import History, ScoreRow, markdown, score

pytestmark = [pytest.mark.spark, pytest.mark.rabbitmq_streams, pytest.mark.slow, pytest.mark.timeout(600)]

BROKER = "rabbitmq-streams"
FAULT = "retention cut under a replayed batch (spark source)"
#: How batch 0 dies before its commit, and the scoreboard row's fault for each.
FAULTS = {"sink-raises": FAULT,
          "driver-sigkill": "streams source driver kill + retention cut (reported or failed, never silent)"}
#: Batch 0 plans all of the first publish; the second one makes retention cut into it.
BATCH, MORE, BODY = 500, 300, 1000
#: ~100 records a segment; 600 kB keep the first 500 records whole, not 800.
RETENTION = {"max-length-bytes": 600_000, "stream-max-segment-size-bytes": 100_000}


class Sink:
    """foreachBatch: fails every batch with rows (the run that dies before its first batch
    commits), or records the ids of each batch."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.ids: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.fail and not df.isEmpty():
            raise RuntimeError(f"sink fails batch {batch_id} before it commits")
        got = [r.message_id for r in df.select("message_id").collect()]
        with self.lock:
            self.ids.extend(got)

    def seen(self) -> list[str]:
        with self.lock:
            return list(self.ids)


def _latest_stats(query: Any) -> list[dict[str, Any]]:
    out = []
    for progress in query.recentProgress:
        for source in progress.get("sources") or []:
            latest = source.get("latestOffset")
            found = json.loads(latest) if isinstance(latest, str) else latest
            if found:  # a replayed batch reports none ("null")
                out.append(dict(found))
    return out


def reported_loss(query: Any) -> int:
    """The stream source's ``data_loss`` counter, as its progress last showed it."""
    return max((int(s.get("data_loss", 0)) for s in _latest_stats(query)), default=0)


def _query(spark: Any, url: str, stream: str, reference: str, tmp: Path, sink: Sink, **options: str) -> Any:
    reader = (spark.readStream.format("ackbridge").option("url", url).option("subscribe", stream)
              .option("consumerReference", reference).option("maxRecordsPerBatch", str(BATCH)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp / "ck"))
            .trigger(processingTime="0.5 seconds").start())


def _retained_stream(streams: Any) -> str:
    from tests.spark.stream_helpers import _producer

    name = f"retention-{uuid.uuid4().hex[:10]}"

    async def create() -> None:
        producer = await _producer()
        try:
            await producer.create_stream(name, arguments=RETENTION)
        finally:
            await producer.close()

    streams.created.append(name)  # deleted by streams.close()
    asyncio.run(create())
    return name


def _last(directory: Path) -> int:
    return max((int(p.name) for p in directory.iterdir() if p.name.isdigit()), default=-1)


def _first(url: str, stream: str) -> tuple[int, int]:
    with open_offset_log(url) as olog:
        return olog.bounds(stream)


def _publish_batch(streams: Any) -> tuple[str, list[str]]:
    """A stream with retention and the first BATCH ids in it (one offset each); all ids."""
    from tests.spark.stream_helpers import STREAM_URL, publish_async

    stream = _retained_stream(streams)
    ids = [f"r-{i}" for i in range(BATCH + MORE)]
    asyncio.run(publish_async(stream, ids[:BATCH], 50, body_size=BODY))
    assert _first(STREAM_URL, stream) == (0, BATCH), "retention cut before batch 0 was planned"
    return stream, ids


def _planned_not_committed(tmp: Path, stream: str) -> None:
    planned, committed = _last(tmp / "ck" / "offsets"), _last(tmp / "ck" / "commits")
    assert planned == committed + 1, (planned, committed)  # planned, never committed
    assert json.loads((tmp / "ck" / "offsets" / str(planned)).read_text().splitlines()[-1]) == {
        stream: {stream: BATCH}}


def _cut(stream: str, ids: list[str]) -> int:
    """Publish the rest of *ids* until retention removes the stream's head; its first offset."""
    from ackbridge.testing.harness import eventually
    from tests.spark.stream_helpers import STREAM_URL, publish_async

    asyncio.run(publish_async(stream, ids[BATCH:], 50, body_size=BODY))
    eventually(lambda: _first(STREAM_URL, stream)[0] > 0, 60, message="retention removed the stream's head")
    first, end = _first(STREAM_URL, stream)
    # One offset per id: nothing else (no offset store) reached the stream before the cut.
    assert end == len(ids) and 0 < first < BATCH, (first, end)
    return first


def plan_batch_then_cut(spark: Any, streams: Any, tmp: Path) -> tuple[str, list[str], int]:
    """Publish, plan batch 0 = [0, BATCH) and fail it before its commit, then let retention
    cut into it. Returns (stream, ids published in offset order, the stream's first offset)."""
    from ackbridge.testing.harness import eventually
    from tests.spark.stream_helpers import STREAM_URL

    stream, ids = _publish_batch(streams)
    query = _query(spark, STREAM_URL, stream, streams.reference, tmp, Sink(fail=True))
    try:
        eventually(lambda: query.exception() is not None, 120, message="batch 0 failed before its commit")
    finally:
        query.stop()
    _planned_not_committed(tmp, stream)
    return stream, ids, _cut(stream, ids)


#: Runs tests/spark/job_exactly_once.py as tests/spark/test_exactly_once.py's job() does, after
#: writing into the job's log which ackbridge_spark it imports (PYTHONPATH may point elsewhere).
_WHICH = ("import runpy, sys, ackbridge_spark; "
          "print('ackbridge_spark imported from', ackbridge_spark.__file__, file=sys.stderr, flush=True); "
          "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def _job(stream: str, tmp: Path, name: str, reference: str, *, block_id: str = "-",
         **options: str) -> subprocess.Popen[bytes]:
    """The exactly-once job on *stream* as its own driver process (its own process group, for
    ``kill``), with no dedupe step: source -> Spark's file sink. With *block_id* a
    processing-time trigger and the task meeting that id blocked; without, AvailableNow."""
    from tests.spark.stream_helpers import STREAM_URL
    from tests.spark.test_exactly_once import BROKER_OPTIONS, JOB

    opts = {**BROKER_OPTIONS["rabbitmq-stream"], "consumerReference": reference, **options}
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               ACKBRIDGE_JOB_OPTIONS=json.dumps(opts), ACKBRIDGE_JOB_DEDUPE="0")
    args = [sys.executable, "-c", _WHICH, JOB, STREAM_URL, stream, str(tmp / "ck"), str(tmp / "table"), block_id,
            str(tmp / "blocked"), str(BATCH), "0"]
    with open(tmp / f"job-{name}.log", "wb") as log_file:
        return subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log_file)


def _log(tmp: Path, name: str) -> str:
    return (tmp / f"job-{name}.log").read_text(errors="replace")


def kill_in_batch_then_cut(streams: Any, tmp: Path) -> tuple[str, list[str], int]:
    """Publish, start the job, SIGKILL its driver (process group) while a task of batch 0 =
    [0, BATCH) is blocked, then let retention cut into the batch. Same return as above."""
    from ackbridge.testing.harness import eventually
    from tests.spark.test_exactly_once import kill

    stream, ids = _publish_batch(streams)
    first_run = _job(stream, tmp, "first", streams.reference, block_id=ids[BATCH // 2])
    try:
        eventually(lambda: (tmp / "blocked").exists() or first_run.poll() is not None, 240,
                   message="a task of batch 0 blocked before its commit")
        assert first_run.poll() is None, _log(tmp, "first")[-3000:]
    finally:
        kill(first_run)
    _planned_not_committed(tmp, stream)
    return stream, ids, _cut(stream, ids)


def restart_job(stream: str, tmp: Path, reference: str, **options: str) -> tuple[int, str]:
    """The killed job restarted from its checkpoint (AvailableNow: replays batch 0, reads to
    the end, exits). Returns its exit code and its log."""
    from tests.spark.test_exactly_once import kill

    again = _job(stream, tmp, "restart", reference, **options)
    try:
        code = again.wait(300)
    finally:
        kill(again)
    return code, _log(tmp, "restart")


_RANGE = re.compile(r"offsets \[(\d+), (\d+)\) of '([^']+)'")


def logged_loss(log_text: str, stream: str) -> tuple[set[int], int]:
    """The offsets of *stream* the source's data-loss WARNING lines name, and how many lines
    (not a ``DataLossError``'s text: a failure is not a count)."""
    lines = [line for line in log_text.splitlines()
             if "data loss: retention removed" in line and "failOnDataLoss=false" in line]
    offsets = {o for line in lines for lo, hi, p in _RANGE.findall(line) if p == stream
               for o in range(int(lo), int(hi))}
    return offsets, len(lines)


def row_streams_retention_cut(spark: Any, tmp: Path, fault: str = "sink-raises") -> tuple[ScoreRow, dict[str, Any]]:
    """The scoreboard row (``failOnDataLoss=false``) and the facts behind it; *fault* is how
    batch 0 dies before its commit: ``sink-raises`` or ``driver-sigkill``."""
    from ackbridge.testing.harness import eventually
    from tests.spark.stream_helpers import STREAM_URL, Streams
    from tests.spark.test_exactly_once import table_ids

    assert fault in FAULTS, fault
    streams = Streams()
    started = time.monotonic()
    code, lines, which = 0, 0, ""
    try:
        if fault == "driver-sigkill":
            stream, ids, first = kill_in_batch_then_cut(streams, tmp)
            code, text = restart_job(stream, tmp, streams.reference)
            delivered = table_ids(tmp)
            covered, lines = logged_loss(text, stream)
            reported = len(covered)
            which = " ".join(line.split()[-1] for line in text.splitlines() if "ackbridge_spark imported from" in line)
            elapsed = time.monotonic() - started
        else:
            stream, ids, first = plan_batch_then_cut(spark, streams, tmp)
            sink = Sink(fail=False)
            query = _query(spark, STREAM_URL, stream, streams.reference, tmp, sink)
            try:
                survivors = set(ids[first:])
                eventually(lambda: query.exception() is not None or survivors <= set(sink.seen()), 180,
                           message="the records that exist delivered")
                assert query.exception() is None, query.exception()
                # The replayed batch makes no progress report of its own: the count shows in the next one.
                try:
                    eventually(lambda: reported_loss(query) >= first, 30, message="the loss counted")
                except AssertionError:
                    pass  # the row says it: a silent loss
                reported = reported_loss(query)
                elapsed = time.monotonic() - started
            finally:
                query.stop()
            delivered = sink.seen()
            # A count covers the removed offsets only if it is theirs.
            covered = set(range(first)) if reported == first else set()
    finally:
        streams.close()
    history = History(injections=1, elapsed_s=elapsed)
    history.attempted.update(ids)
    history.confirmed.update(ids)
    history.delivered.update(delivered)
    removed = set(ids[:first])
    row = score(BROKER, "spark source", FAULTS[fault], history)
    silent = history.confirmed - set(history.delivered) - {ids[o] for o in covered if o < len(ids)}
    errors = [] if code == 0 else [f"the restart exited {code}"]
    if reported != len(removed) or not covered <= set(range(first)):
        errors.append(f"retention removed {len(removed)} offsets, {reported} reported")
    row = dataclasses.replace(row, lost=len(silent), dead_lettered="-", error="; ".join(errors))
    facts = {"first": first, "data_loss": reported, "delivered": Counter(delivered), "survivors": set(ids[first:]),
             "exit": code, "warnings": lines, "ackbridge_spark": which}
    return row, facts


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from tests.conftest import IN_CI
    from tests.spark.helpers import HAVE_JAVA, make_spark

    require_port(5552, "RabbitMQ's stream plugin (rabbitmq-plugins enable rabbitmq_stream)")
    if not HAVE_JAVA:
        if IN_CI:  # a missing Java is a failure in CI, never a skip
            pytest.fail("Java is needed for the Spark tests (scripts/setup.sh installs it)")
        pytest.skip("Java is needed for the Spark tests")
    session = make_spark("ackbridge-retention-replay")
    yield session
    session.stop()


@pytest.mark.parametrize("fault", list(FAULTS))
def test_retention_cut_under_a_replayed_batch_is_counted(spark: Any, tmp_path: Path, fault: str) -> None:
    row, facts = row_streams_retention_cut(spark, tmp_path, fault)
    print(markdown([row]))
    print({k: v for k, v in facts.items() if k not in ("delivered", "survivors")})
    assert facts["exit"] == 0, _log(tmp_path, "restart")[-3000:]
    assert facts["data_loss"] == facts["first"], facts["data_loss"]  # every removed offset, once
    delivered = facts["delivered"]
    assert set(delivered) == facts["survivors"] and max(delivered.values()) == 1  # what exists, once
    assert row.passed, row


@pytest.mark.parametrize("fault", list(FAULTS))
def test_retention_cut_under_a_replayed_batch_fails_with_fail_on_data_loss(spark: Any, tmp_path: Path,
                                                                           fault: str) -> None:
    from ackbridge.testing.harness import eventually
    from tests.spark.stream_helpers import STREAM_URL, Streams
    from tests.spark.test_exactly_once import table_ids

    streams = Streams()
    try:
        if fault == "driver-sigkill":
            stream, ids, first = kill_in_batch_then_cut(streams, tmp_path)
            code, text = restart_job(stream, tmp_path, streams.reference, failOnDataLoss="true")
            rows = table_ids(tmp_path)
            named = len(logged_loss(text, stream)[0])
            assert code != 0, f"no failure; {len(set(rows))} rows, WARNING lines name {named} offsets"
            assert f"offsets [0, {first}) of {stream!r}" in text and "failOnDataLoss" in text, text[-3000:]
            assert rows == []  # the replayed batch did not reach the table
            return
        stream, ids, first = plan_batch_then_cut(spark, streams, tmp_path)
        sink = Sink(fail=False)
        query = _query(spark, STREAM_URL, stream, streams.reference, tmp_path, sink, failOnDataLoss="true")
        try:
            eventually(lambda: query.exception() is not None or set(ids[first:]) <= set(sink.seen()), 180,
                       message="the query failed or read on")
            error = query.exception()
            assert error is not None, f"no failure; {len(set(sink.seen()))} rows, data_loss {reported_loss(query)}"
            assert f"offsets [0, {first}) of {stream!r}" in str(error) and "failOnDataLoss" in str(error)
            assert sink.seen() == []  # the replayed batch did not reach the sink
        finally:
            query.stop()
    finally:
        streams.close()
