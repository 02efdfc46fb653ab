"""The executor-side source's planning, reading and committing, against an in-process
fake offset log (tests/spark/fake_log.py): no Spark session, no broker. The same
reader object plays Spark's runner; a pickled copy plays the executors."""

from __future__ import annotations

import itertools
import json
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ackbridge.errors import DataLossError, InvalidOptionError
from ackbridge.transport.offset_log import OffsetRange
from ackbridge_spark.log.options import parse_log, refuse_log_only
from ackbridge_spark.log.plan import (
    Split,
    advance,
    allocate,
    canonical,
    parse_position,
    parse_starting,
    ranges,
    split,
)
from ackbridge_spark.log.reader import LogSplit, close_worker_logs
from ackbridge_spark.log.source import LogStreamReader

from . import fake_log
from .fake_log import FakeBroker

pytestmark = [pytest.mark.spark]


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    fake_log.install()
    fake_log.BROKERS.clear()
    broker = fake_log.BROKERS.setdefault("b", FakeBroker())
    yield broker
    close_worker_logs()
    fake_log.BROKERS.clear()
    fake_log.uninstall()


def reader(**options: str) -> LogStreamReader:
    given = {"url": "fakelog://b/", "subscribe": "s", "consumerReference": "app", **options}
    return LogStreamReader(parse_log(given))


def rows(r: LogStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[str, str, int, str]]:
    """Every row of the batch, read as the executors do: on a pickled copy, split by split."""
    executor = pickle.loads(pickle.dumps(r))
    out = []
    for part in pickle.loads(pickle.dumps(list(r.partitions(start, end)))):
        for batch in executor.read(part):
            for row in batch.to_pylist():
                out.append((row["source"], row["topic"], row["offset"], row["message_id"]))
    return out


# ---- pure planning ---------------------------------------------------------------------
def test_allocate_shares_the_cap_by_backlog_exactly() -> None:
    assert allocate({"a": 10, "b": 0}, None) == {"a": 10, "b": 0}
    assert allocate({"a": 10, "b": 5}, 100) == {"a": 10, "b": 5}
    shares = allocate({"a": 60, "b": 30, "c": 10}, 10)
    assert shares == {"a": 6, "b": 3, "c": 1}
    shares = allocate({"a": 7, "b": 7, "c": 7}, 10)
    assert sum(shares.values()) == 10 and shares == {"a": 4, "b": 3, "c": 3}  # leftover: first in order
    assert allocate({"a": 1, "b": 1000}, 5) == {"a": 0, "b": 5}


def test_advance_caps_and_respects_an_availablenow_target() -> None:
    start = {"s": {"s-0": 0, "s-1": 10}}
    bounds = {"s": {"s-0": (0, 100), "s-1": (0, 20)}}
    assert advance(start, bounds, None) == {"s": {"s-0": 100, "s-1": 20}}
    capped = advance(start, bounds, 11)
    assert sum(capped["s"].values()) - 10 == 11
    assert advance(start, bounds, None, limit={"s": {"s-0": 40, "s-1": 10}}) == {"s": {"s-0": 40, "s-1": 10}}
    # Retention removed 0..49 of s-0: the start moves to 50, and the cap counts real records only.
    assert advance({"s": {"s-0": 0}}, {"s": {"s-0": (50, 60)}}, 5) == {"s": {"s-0": 55}}
    assert advance({"s": {"s-0": 0}}, {"s": {"s-0": (50, 50)}}, 5) == {"s": {"s-0": 50}}


def test_positions_serialise_alike_whatever_the_order() -> None:
    a = canonical({"b": {"y": 1, "x": 2}, "a": {"z": 3}})
    b = parse_position(json.dumps({"a": {"z": 3}, "b": {"x": 2, "y": 1}}))
    assert json.dumps(a) == json.dumps(b)


def test_split_covers_each_range_once_and_honours_min_partitions() -> None:
    batch = ranges({"s": {"p0": 0, "p1": 100, "p2": 5}}, {"s": {"p0": 90, "p1": 130, "p2": 5}})
    assert [(s.range.partition, s.range.start, s.range.end) for s in batch] == [("p0", 0, 90), ("p1", 100, 130)]
    assert split(batch, None) == batch
    for want in (1, 2, 3, 7, 50, 120, 500):
        parts = split(batch, want)
        assert len(parts) == min(max(want, 2), 120)  # at least one per range, at most one per offset
        for partition, lo, hi in (("p0", 0, 90), ("p1", 100, 130)):
            mine = sorted((s.range.start, s.range.end) for s in parts if s.range.partition == partition)
            assert mine[0][0] == lo and mine[-1][1] == hi
            assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))  # contiguous, no overlap
        sizes = [s.range.count for s in parts]
        if 3 <= want <= 120:  # cut further than one per range: balanced pieces
            assert max(sizes) <= 2 * min(sizes) + 1
        assert split(batch, want) == parts  # a function of its arguments: replay plans the same


def test_split_keeps_the_source_of_each_range() -> None:
    parts = split([Split("orders", OffsetRange("orders-1", 0, 10))], 3)
    assert {s.source for s in parts} == {"orders"} and len(parts) == 3


@pytest.mark.parametrize("text", ["middle", '{"s": "x"}', '{"s": -3}', "[1]", '{"s": true}'])
def test_bad_starting_offsets(text: str) -> None:
    with pytest.raises(InvalidOptionError, match="startingOffsets"):
        parse_starting(text)


def test_starting_offsets_per_partition() -> None:
    starting = parse_starting('{"s-0": 7, "s-1": -1, "s-2": -2, "s-3": 999}')
    assert starting.offset("s-0", 0, 10) == 7
    assert starting.offset("s-1", 0, 10) == 10
    assert starting.offset("s-2", 3, 10) == 3
    assert starting.offset("s-3", 0, 10) == 10  # past the end: the end
    assert starting.offset("other", 2, 10) == 2  # not named: earliest


# ---- options -----------------------------------------------------------------------------
@pytest.mark.parametrize(("given", "expected"), [
    ({"consumerReference": ""}, "needs option 'consumerReference'"),
    ({"consumerReference": "x" * 256}, "longer than 255"),
    ({"minPartitions": "0"}, "'minPartitions' must be >= 1"),
    ({"minPartitions": "two"}, "'minPartitions' must be an integer"),
    ({"maxRecordsPerBatch": "-5"}, "'maxRecordsPerBatch' must be >= 1"),
    ({"minPartiton": "3"}, "did you mean 'minPartitions'"),
    ({"startingOffset": "latest"}, "did you mean 'startingOffsets'"),
    ({"hearbeat": "3"}, "did you mean 'heartbeat'"),
    ({"heartbeat": "soon"}, "'heartbeat'='soon' is not a valid float"),
    ({"parallelism": "2"}, "'parallelism' does not apply to the stream source.*minPartitions"),
    ({"writeAheadPath": "/tmp/x"}, "'writeAheadPath' does not apply"),
    ({"maxPartitionBytes": "4096"}, "'maxPartitionBytes' does not apply"),
    ({"localFiles": "false"}, "'localFiles' does not apply"),
    ({"startingOffsets": "soon"}, "'startingOffsets' must be"),
    ({"failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true or false"),
    ({"subscribe": "a,,b"}, "empty name"),
    ({"queue": "q"}, "not several"),
])
def test_bad_options_are_refused_at_parse(fake: FakeBroker, given: dict[str, str], expected: str) -> None:
    options = {"url": "fakelog://user:Canary-pw-77@b/", "subscribe": "s", "consumerReference": "app", **given}
    with pytest.raises(InvalidOptionError, match=expected) as info:
        parse_log(options)
    assert "Canary-pw-77" not in str(info.value)
    assert fake.opened == 0  # nothing connected


def test_stream_only_options_are_refused_on_a_queue_broker() -> None:
    with pytest.raises(InvalidOptionError, match="'minPartitions' applies to offset-log brokers only"):
        refuse_log_only({"url": "local:///tmp/x.db", "queue": "q", "minPartitions": "4"})


# ---- the reader --------------------------------------------------------------------------
def test_batches_read_every_record_once_on_the_executors(fake: FakeBroker) -> None:
    fake.stream("s", 25, partitions=2)
    r = reader(maxRecordsPerBatch="10")
    start = r.initialOffset()
    assert start == {"s": {"s-0": 0, "s-1": 0}}
    seen = []
    limit = r.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows)
    while True:
        end = r.latestOffset(start, limit)
        if end == start:
            break
        batch = rows(r, start, end)
        assert 0 < len(batch) <= 10
        seen += batch
        r.commit(end)
        start = end
    assert sorted(m for *_, m in seen) == sorted(f"s-m{i}" for i in range(25))
    assert all(src == "s" and topic in ("s-0", "s-1") for src, topic, _, _ in seen)
    # Stored on the broker, under the reference, for each partition: the next offset to read.
    assert fake.stored == {("s-0", "app"): 13, ("s-1", "app"): 12}


def test_a_replayed_batch_reads_the_same_rows_on_a_fresh_reader(fake: FakeBroker) -> None:
    fake.stream("s", 40, partitions=2)
    first = reader(minPartitions="5")
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())
    planned = list(first.partitions(start, end))
    assert len(planned) == 5
    rows_first = rows(first, start, end)
    fake.append("s-0", b"late")  # the log grows meanwhile: the batch's range does not
    # The driver dies; a new runner replays (start, end) from the checkpoint's JSON.
    again = reader(minPartitions="5")
    s, e = json.loads(json.dumps(start)), json.loads(json.dumps(end))
    assert list(again.partitions(s, e)) == planned
    assert rows(again, s, e) == rows_first
    assert len(rows_first) == 40


def test_min_partitions_splits_a_single_stream(fake: FakeBroker) -> None:
    fake.stream("s", 100)
    r = reader(minPartitions="4")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    parts = list(r.partitions(start, end))
    assert [(p.start, p.end) for p in parts] == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert all(isinstance(p, LogSplit) for p in parts)


def test_start_from_the_stored_offset_else_starting_offsets(fake: FakeBroker) -> None:
    fake.stream("s", 10, partitions=2)
    fake.stored[("s-0", "app")] = 3
    assert reader().initialOffset() == {"s": {"s-0": 3, "s-1": 0}}
    assert reader(startingOffsets="latest").initialOffset() == {"s": {"s-0": 3, "s-1": 5}}
    assert reader(consumerReference="other", startingOffsets="latest").initialOffset() == {"s": {"s-0": 5, "s-1": 5}}


def test_settle_on_plan_stores_a_committed_batch_even_when_idle(fake: FakeBroker) -> None:
    fake.stream("s", 5)
    r = reader()
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    # Spark writes commits/0, then asks latestOffset(start=end_0) before commit(end_0).
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end
    assert fake.stored[("s", "app")] == 5
    off = reader(settleOnPlan="false")
    off.latestOffset(end, off.getDefaultReadLimit())
    assert fake.stores.count(("s", "app", 5)) == 1  # only the first reader stored it
    off.commit(end)
    assert fake.stores.count(("s", "app", 5)) == 2


def test_available_now_stops_at_the_end_seen_at_start(fake: FakeBroker) -> None:
    fake.stream("s", 10)
    r = reader(maxRecordsPerBatch="4")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    for _ in range(20):
        fake.append("s", b"more")  # arrives while the run drains
        end = r.latestOffset(start, r.getDefaultReadLimit())
        if end == start:
            break
        start = end
    assert start == {"s": {"s": 10}}


def test_retention_loss_is_counted_once_or_fails_the_query(fake: FakeBroker) -> None:
    fake.stream("s", 10)
    fake.stored[("s", "app")] = 2
    fake.truncate("s", 6)
    r = reader()
    start = r.initialOffset()
    assert start == {"s": {"s": 2}}  # not clamped: the loss must show
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"s": {"s": 10}} and r.stats["data_loss"] == 4
    assert [m for *_, m in rows(r, start, end)] == [f"s-m{i}" for i in range(6, 10)]
    r.latestOffset(end, r.getDefaultReadLimit())
    assert r.stats["data_loss"] == 4
    strict = reader(failOnDataLoss="true")
    with pytest.raises(DataLossError, match=r"offsets \[2, 6\) of 's' \(4\)"):
        strict.latestOffset(start, strict.getDefaultReadLimit())


def test_a_grown_super_stream_enters_through_an_empty_batch(fake: FakeBroker) -> None:
    fake.stream("s", 4, partitions=1)
    r = reader()
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    fake.sources["s"].append("s-1")
    fake.logs["s-1"] = [b"new-0", b"new-1"]
    grown = r.latestOffset(end, r.getDefaultReadLimit())
    assert grown == {"s": {"s-0": 4, "s-1": 0}} and rows(r, end, grown) == []
    after = r.latestOffset(grown, r.getDefaultReadLimit())
    assert [m for *_, m in rows(r, grown, after)] == ["new-0", "new-1"]


def test_a_log_listed_twice_is_refused(fake: FakeBroker) -> None:
    fake.stream("s", 4, partitions=2)
    fake.sources["s-1"] = ["s-1"]
    with pytest.raises(InvalidOptionError, match="'s-1' is read twice"):
        reader(subscribe="s,s-1").initialOffset()


def test_a_failed_store_is_counted_and_retried_not_raised(fake: FakeBroker) -> None:
    fake.stream("s", 3)
    r = reader(settleOnPlan="false")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    fake.fail_stores = 2  # the call and its one retry on a new connection
    r.commit(end)
    # Still the start stored before batch 0, not the committed end.
    assert r.stats["store_failures"] == 1 and fake.stored[("s", "app")] == 0
    r.commit(end)
    assert fake.stored[("s", "app")] == 3


def test_a_kept_executor_connection_that_fails_is_replaced_and_the_read_resumes(fake: FakeBroker) -> None:
    fake.stream("s", 6)
    r = reader()
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert len(rows(r, start, end)) == 6  # opens the worker's connection and keeps it
    fake.fail_reads = 1
    again = rows(r, start, end)
    assert [m for *_, m in again] == [f"s-m{i}" for i in range(6)]  # no gap, no duplicate


def test_the_pickled_reader_carries_no_connection(fake: FakeBroker) -> None:
    fake.stream("s", 3)
    r = reader()
    r.initialOffset()
    copy = pickle.loads(pickle.dumps(r))
    assert copy._log is None and fake.opened == 1
    assert "app" in repr(r._opts) and "fakelog" not in repr(r._opts)


# ---- a replayed range that retention shortened (issue 32, finding 3) ------------------------
def _planned(fake: FakeBroker, n: int = 10, **options: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Batch 0 as a first runner plans it: offsets [0, n) of "s" (then the driver dies)."""
    fake.stream("s", n)
    first = reader(**options)
    start = first.initialOffset()
    return start, first.latestOffset(start, first.getDefaultReadLimit())


def _replayed_start(replay: LogStreamReader, planned: dict[str, Any]) -> dict[str, Any]:
    """What Spark hands a fresh runner as the start of a replayed batch 0: its own
    initialOffset (the start of batch 0 is not in the checkpoint)."""
    start = replay.initialOffset()
    assert start == planned, "a replay of batch 0 must start where the first attempt did"
    return start


def test_a_replayed_range_shortened_by_retention_is_counted_and_logged(
        fake: FakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    start, end = _planned(fake)
    fake.truncate("s", 4)  # retention, while no runner is alive
    replay = reader()  # a fresh runner: Spark hands it the planned range, never latestOffset
    with caplog.at_level("WARNING", logger="ackbridge"):
        got = rows(replay, _replayed_start(replay, start), end)
    assert [m for *_, m in got] == [f"s-m{i}" for i in range(4, 10)]  # what exists, once
    assert replay.stats["data_loss"] == 4
    warned = [r for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("ackbridge")]
    assert len(warned) == 1 and "offsets [0, 4) of 's'" in warned[0].getMessage(), warned
    rows(replay, start, end)  # Spark may plan the same batch again: reported once
    replay.latestOffset(end, replay.getDefaultReadLimit())
    assert replay.stats["data_loss"] == 4


def test_a_replayed_range_shortened_by_retention_fails_with_fail_on_data_loss(fake: FakeBroker) -> None:
    _, end = _planned(fake)
    fake.truncate("s", 4)
    for kept in ({("s", "app"): 0}, {}):  # the fake keeps a stored 0, RabbitMQ stores nothing
        fake.stored = dict(kept)
        for _ in range(2):  # each restart fails again: no replay stores a start of its own
            replay = reader(failOnDataLoss="true")
            with pytest.raises(DataLossError, match=r"offsets \[0, 4\) of 's'.*failOnDataLoss"):
                replay.partitions(replay.initialOffset(), end)
            assert fake.stored == kept


def test_a_replayed_range_retention_removed_entirely_is_all_lost(fake: FakeBroker) -> None:
    start, end = _planned(fake, 6)
    for i in range(6):
        fake.append("s", f"later-{i}".encode())
    fake.truncate("s", 8)
    replay = reader()
    assert rows(replay, _replayed_start(replay, start), end) == [] and replay.stats["data_loss"] == 6
    after = replay.latestOffset(end, replay.getDefaultReadLimit())
    assert replay.stats["data_loss"] == 8 and after == {"s": {"s": 12}}  # [6, 8) once more, no overlap


def test_retention_between_planning_and_the_executors_read_is_reported_by_the_executor(
        fake: FakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    fake.stream("s", 10)
    for options in ({}, {"failOnDataLoss": "true"}):
        r = reader(**options)
        start = {"s": {"s": 0}}
        end = r.latestOffset(start, r.getDefaultReadLimit())
        splits = r.partitions(start, end)  # nothing lost yet: the driver saw the whole range
        fake.truncate("s", 3)  # retention before the task reads
        executor = pickle.loads(pickle.dumps(r))
        if options:
            with pytest.raises(DataLossError, match=r"offsets \[0, 3\) of 's'"):
                [b for part in splits for b in executor.read(part)]
        else:
            with caplog.at_level("WARNING", logger="ackbridge"):
                got = [row for part in splits for b in executor.read(part) for row in b.to_pylist()]
            assert [row["offset"] for row in got] == list(range(3, 10))
            assert any("offsets [0, 3) of 's'" in rec.getMessage() for rec in caplog.records)
        fake.logs["s"] = [f"s-m{i}".encode() for i in range(10)]


def test_a_replay_where_the_broker_kept_no_start_0_starts_at_0(
        fake: FakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    """RabbitMQ stores "the last offset processed": a start of 0 leaves nothing stored
    (OffsetLog.store_offset may store nothing for 0). Every other start was stored before
    batch 0 was planned, so a replaying runner that finds none knows the start was 0."""
    start, end = _planned(fake)
    assert start == {"s": {"s": 0}}
    fake.stored.clear()  # as RabbitMQ: next_offset=0 stores nothing
    fake.truncate("s", 4)
    replay = reader()
    replay_start = replay.initialOffset()
    assert replay_start == {"s": {"s": 4}}  # startingOffsets=earliest, worked out now
    with caplog.at_level("WARNING", logger="ackbridge"):
        got = rows(replay, replay_start, end)
    assert [o for _, _, o, _ in got] == list(range(4, 10)) and replay.stats["data_loss"] == 4
    assert any("offsets [0, 4) of 's'" in r.getMessage() for r in caplog.records)
    assert fake.stored == {}  # the replay stores no start of its own


def test_the_first_start_is_stored_before_batch_0_and_a_stored_one_is_kept(fake: FakeBroker) -> None:
    fake.stream("s", 10, partitions=2)
    fake.stored[("s-0", "app")] = 3
    for settle in ("true", "false"):
        fake.stored = {("s-0", "app"): 3}
        fake.stores.clear()
        r = reader(startingOffsets="latest", settleOnPlan=settle)
        initial = r.initialOffset()
        assert initial == {"s": {"s-0": 3, "s-1": 5}} and fake.stores == []
        fake.append("s-1", b"arrived-before-the-plan")
        end = r.latestOffset(initial, r.getDefaultReadLimit())
        # The start that came from startingOffsets, stored as the next offset to read; the
        # stored one left alone; both before Spark writes offsets/0 (latestOffset's answer).
        assert fake.stores == [("s-1", "app", 5)], settle
        assert end == {"s": {"s-0": 5, "s-1": 6}}
        fake.append("s-1", b"arrived-after-the-plan")
        assert r.initialOffset() == initial  # Spark asks again when it runs batch 0
        assert [o for _, p, o, _ in rows(r, initial, end) if p == "s-1"] == [5]
        fake.logs["s-1"] = fake.logs["s-1"][:5]


def test_a_replayed_batch_0_starting_at_latest_reads_what_arrived_before_the_plan(fake: FakeBroker) -> None:
    fake.stream("s", 5)
    first = reader(startingOffsets="latest", settleOnPlan="false")
    start = first.initialOffset()
    fake.append("s", b"early-5")
    fake.append("s", b"early-6")
    end = first.latestOffset(start, first.getDefaultReadLimit())  # batch 0 = [5, 7); the driver dies
    fake.append("s", b"late-7")
    replay = reader(startingOffsets="latest", settleOnPlan="false")
    got = rows(replay, _replayed_start(replay, start), end)
    assert [m for *_, m in got] == ["early-5", "early-6"] and replay.stats["data_loss"] == 0


def test_a_failed_store_of_the_first_start_is_logged_and_the_query_goes_on(
        fake: FakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    fake.stream("s", 5)
    r = reader(startingOffsets="latest", settleOnPlan="false")
    start = r.initialOffset()
    fake.fail_stores = 2  # the call and its one retry on a new connection
    with caplog.at_level("WARNING", logger="ackbridge.spark"):
        assert r.latestOffset(start, r.getDefaultReadLimit()) == start
    assert r.stats["store_failures"] == 1 and fake.stored == {}
    assert any("replay of the first batch cannot detect retention loss" in rec.getMessage()
               for rec in caplog.records if rec.name == "ackbridge.spark"), caplog.records


def test_a_gap_inside_the_log_is_not_loss(fake: FakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    """A broker spends offsets on its own records (RabbitMQ's offset-tracking entries):
    a range starting on one reads nothing there, yet nothing is lost."""
    fake.stream("s", 10)
    fake.logs["s"][1] = fake.logs["s"][2] = None  # not retention: the log still starts at 0
    start, end = {"s": {"s": 1}}, {"s": {"s": 10}}
    with caplog.at_level("WARNING", logger="ackbridge"):
        replay = reader(failOnDataLoss="true")
        got = rows(replay, start, end)
    assert [o for _, _, o, _ in got] == list(range(3, 10)) and replay.stats["data_loss"] == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
