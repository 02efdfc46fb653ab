"""The executor-side streaming source, for brokers that keep offset logs (RabbitMQ streams).

What runs where (see docs/spark.md, "Which source, and what runs where"):

* the driver's runner process asks the broker for small facts only -- the
  partitions of each source and each partition's ``(first, end)`` bounds --
  and plans: ``latestOffset`` moves each partition toward its end (at most
  ``maxRecordsPerBatch`` offsets in all), ``partitions`` cuts the batch into
  offset ranges (one or more per partition, ``minPartitions`` at least);
* offsets retention removed before the query read them are data loss wherever
  they show: a start below the log's first offset in ``latestOffset``, a planned
  range -- also one Spark replays from the checkpoint, which never passes
  ``latestOffset`` -- starting below it in ``partitions``, and retention between
  the plan and the read on the executor (:func:`ackbridge_spark.log.loss.report_removed`);
* the start of the first batch is not in Spark's checkpoint (Spark asks
  ``initialOffset`` for it again when it replays batch 0): each partition's start
  that did not come from the broker is stored under ``consumerReference`` before
  the first batch is planned, so a replay of batch 0 starts where the first
  attempt did (see :meth:`LogStreamReader.initialOffset`);
* each executor task opens its own connection and reads its range
  (:mod:`ackbridge_spark.log.reader`); no payload passes through the driver;
* once Spark has committed a batch, the runner stores each partition's next
  offset on the broker under ``consumerReference`` (``OffsetLog.store_offset``:
  the log's cumulative ack), so other tools see the query's progress.

Exactly-once into Spark's file sink holds by construction: Spark's checkpoint
holds both positions of every planned batch, a range of a log always holds
the same records, and :func:`ackbridge_spark.log.plan.split` depends on the
positions alone -- a batch replayed after a driver crash has the same rows,
and the file sink's ``_spark_metadata`` log adds a batch's files once. The
offsets stored on the broker are for the world to see and for a *new*
checkpoint's start; a query with a checkpoint always resumes from the checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ackbridge.errors import InvalidOptionError
from ackbridge.transport.offset_log import OffsetLog
from ackbridge_spark.log.loss import Removed, report_removed
from ackbridge_spark.log.options import LogSourceOptions
from ackbridge_spark.log.plan import (
    Bounds,
    Position,
    Split,
    advance,
    canonical,
    parse_position,
    ranges,
    split,
)
from ackbridge_spark.log.reader import LogSplit, read_split
from ackbridge_spark.reader_state import OptionsOnlyPickle
from ackbridge_spark.runner import install_sigterm_handler

log = logging.getLogger("ackbridge.spark")


class LogStreamReader(OptionsOnlyPickle[LogSourceOptions], DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: LogSourceOptions) -> None:
        self._opts = options
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._log: OffsetLog | None = None
        #: Per partition, the offset this runner last stored (or read back) on the broker.
        self._stored: dict[str, int] = {}
        #: AvailableNow: the ends the logs had when the query started; never read past them.
        self._target: Position | None = None
        self._latest: Position = {}
        #: Per partition, the first offset the log held when this runner last asked.
        self._first: dict[str, int] = {}
        #: Per partition, the offset below which this runner has reported every removed
        #: offset: a loss is counted once, whichever call saw it first.
        self._reported: dict[str, int] = {}
        #: The start of the first batch, as initialOffset first answered (Spark asks again).
        self._initial: Position | None = None
        #: Partitions of ``_initial`` whose start came from ``startingOffsets``, not from the
        #: broker, until the first latestOffset stores them (or partitions() replays batch 0).
        self._unstored: set[str] = set()
        self.stats = {"stored": 0, "store_failures": 0, "data_loss": 0, "reconnects": 0}

    # ---- the driver's connection (runner only, lazily) ---------------------------------
    def _broker(self) -> OffsetLog:
        if self._log is None:
            from ackbridge.transport.offset_log import open_offset_log

            install_sigterm_handler()
            self._log = open_offset_log(self._opts.url, **self._opts.log_options)
        return self._log

    def _drop(self) -> None:
        olog, self._log = self._log, None
        if olog is not None:
            self.stats["reconnects"] += 1
            with contextlib.suppress(Exception):
                olog.close()

    def _ask(self, call: Any) -> Any:
        """Run ``call(log)``; on a failure, once more on a new connection (a broker
        restart or a closed idle connection must not fail the query). Every call is a
        read of the broker's state or an offset store, both safe to repeat. A query's
        own mistake (a log listed twice) is not the connection's: raised at once."""
        try:
            return call(self._broker())
        except InvalidOptionError:
            raise
        except Exception:
            self._drop()
            return call(self._broker())

    def _bounds(self) -> dict[str, Bounds]:
        """``{source: {partition: (first, end)}}`` for every listed source."""
        def ask(olog: OffsetLog) -> dict[str, Bounds]:
            out: dict[str, Bounds] = {}
            owner: dict[str, str] = {}
            for source in self._opts.sources:
                parts: dict[str, tuple[int, int]] = {}
                for partition in olog.partitions(source):
                    if partition in owner:
                        raise InvalidOptionError(
                            f"log {partition!r} is read twice: through {owner[partition]!r} and {source!r}; "
                            "list each stream once (a super stream already holds its partitions)")
                    owner[partition] = source
                    parts[partition] = olog.bounds(partition)
                out[source] = parts
            return out
        result: dict[str, Bounds] = self._ask(ask)
        for parts in result.values():
            self._first.update({p: first for p, (first, _end) in parts.items()})
        return result

    def _seed(self, position: Position, bounds: dict[str, Bounds]) -> tuple[Position, bool]:
        """*position* with every partition of *bounds* in it: a partition not there yet
        starts at the reference's stored offset, else at ``startingOffsets``. (A fresh
        query seeds them all; a running one, the partitions a super stream grew.)"""
        out: Position = {s: dict(p) for s, p in position.items()}
        grew = False
        for source, parts in bounds.items():
            have = out.setdefault(source, {})
            for partition, (first, end) in parts.items():
                if partition in have:
                    continue
                stored = self._ask(lambda olog, p=partition: olog.stored_offset(p, self._opts.reference))
                if stored is not None:
                    self._stored[partition] = stored
                    # Below the first offset: reported by _check_loss, not hidden by a clamp.
                    have[partition] = min(stored, end)
                else:
                    have[partition] = self._opts.starting.offset(partition, first, end)
                grew = True
        return canonical(out), grew

    # ---- DataSourceStreamReader ----------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        """Each partition at the reference's stored offset, else at ``startingOffsets``.

        Spark asks this again for the start of batch 0 when it runs it -- and when it
        replays it after a crash, in a new runner: that start is not in the checkpoint.
        So one runner answers the same every time, and the starts that did not come from
        the broker are stored under ``consumerReference`` by the first ``latestOffset``
        (before Spark writes ``offsets/0``; storing here would let a replaying runner
        store a start worked out after retention). A replay then finds them stored and
        plans the same range, and ``partitions`` reports what retention removed from it.
        The one start a broker may not store is 0 (RabbitMQ stores "the last offset
        processed"): a replay that finds nothing stored knows the first attempt started
        there (see :meth:`partitions`)."""
        if self._initial is None:
            self._initial, _ = self._seed({}, self._bounds())
            self._unstored = {p for parts in self._initial.values() for p in parts} - set(self._stored)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self._opts.max_records_per_batch
        return ReadMaxRows(cap) if cap is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Pin what "available now" means: the ends the logs have at this moment.
        # Records appended later wait for the next run, as in Spark's Kafka source.
        self._target = canonical({s: {p: end for p, (_f, end) in parts.items()}
                                  for s, parts in self._bounds().items()})

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = parse_position(start)
        if self._unstored:
            self._store_initial(begin)
        if self._opts.settle_on_plan:
            # commits/N is on disk before latestOffset(start=end_N) is called: store
            # the committed offsets now, so an idle query's last batch shows too.
            self._store(begin)
        bounds = self._bounds()
        begin, grew = self._seed(begin, bounds)
        if not grew:
            self._check_loss(begin, bounds)
        cap = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None
        if cap is None and not isinstance(limit, ReadAllAvailable):
            cap = self._opts.max_records_per_batch
        self._latest = canonical({s: {p: e for p, (_f, e) in parts.items()} for s, parts in bounds.items()})
        if grew:
            # New partitions enter the offset first, in a batch of their own with no
            # rows: a range needs its partition in both positions of a batch.
            return begin
        end = advance(begin, bounds, cap, self._target)
        return start if end == begin else end

    def _check_loss(self, begin: Position, bounds: dict[str, Bounds]) -> None:
        """Offsets between each partition's start and its log's first offset (the next
        batch moves past them)."""
        self._report([(p, at, bounds[s][p][0]) for s, parts in begin.items() for p, at in parts.items()
                      if p in bounds.get(s, {})], "before the query read them")

    def _report(self, removed: Sequence[Removed], when: str) -> None:
        """Report the part of each removed range this runner has not reported yet."""
        fresh = [(p, max(lo, self._reported.get(p, 0)), hi) for p, lo, hi in removed]
        self.stats["data_loss"] += report_removed(fresh, self._opts.fail_on_data_loss, when)
        for p, lo, hi in fresh:
            if hi > lo:
                self._reported[p] = max(self._reported.get(p, 0), hi)

    def _check_planned(self, batch: Sequence[Split]) -> None:
        """A range starting below its log's first offset lost the offsets up to it. Spark
        hands a restarted runner the batch its predecessor planned but did not commit
        without a latestOffset call: its partitions are asked here. A batch this runner
        planned uses what latestOffset just heard (retention since then: the executor)."""
        unknown = sorted({s.range.partition for s in batch} - set(self._first))
        for partition in unknown:
            self._first[partition] = self._ask(lambda olog, p=partition: olog.bounds(p))[0]
        self._report([(s.range.partition, s.range.start, min(self._first[s.range.partition], s.range.end))
                      for s in batch], "before the batch read them")

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        # The splits follow from the two positions alone (no broker call), so the
        # replay of a batch a dead driver planned reads exactly the same ranges.
        begin, stop = parse_position(start), parse_position(end)
        if self._unstored and begin == self._initial:
            # Batch 0 planned by a runner that died before committing it: this runner
            # never called latestOffset, and found no stored start for these partitions.
            # The first attempt stored every start but 0 before planning (a failed store
            # was logged), so it started them at 0; a start worked out now would hide
            # what retention removed since.
            for parts in begin.values():
                for partition in self._unstored & set(parts):
                    parts[partition] = 0
            self._unstored = set()
        batch = ranges(begin, stop)
        self._check_planned(batch)
        planned = split(batch, self._opts.min_partitions)
        return [LogSplit(s.source, s.range.partition, s.range.start, s.range.end,
                         self._reported.get(s.range.partition, 0)) for s in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogSplit)
        return read_split(partition, self._opts)

    def commit(self, end: dict[str, Any]) -> None:
        self._store(parse_position(end))

    def _store_initial(self, begin: Position) -> None:
        """Before the first batch is planned: store the starts of ``_initial`` that did
        not come from the broker, so a replay of batch 0 plans the same range."""
        unstored, self._unstored = self._unstored, set()
        if begin != self._initial:
            return
        for parts in begin.values():
            for partition in sorted(unstored & set(parts)):
                offset = parts[partition]
                try:
                    self._ask(lambda olog, p=partition, o=offset: olog.store_offset(p, self._opts.reference, o))
                except Exception as exc:
                    self.stats["store_failures"] += 1
                    log.warning("ackbridge stream source: storing the start of %s (offset %d) under "
                                "consumerReference %r failed (%s): a replay of the first batch cannot detect "
                                "retention loss in it (it would read this partition from offset 0)",
                                partition, offset, self._opts.reference, type(exc).__name__)
                    continue
                self._stored[partition] = offset
                self.stats["stored"] += 1

    def _store(self, position: Position) -> None:
        """Store each partition's next offset that moved since this runner last stored it.

        A failure is logged and counted, not raised: the checkpoint, not the broker,
        is where the query resumes; the next commit stores the offsets again."""
        for parts in position.values():
            for partition, offset in parts.items():
                if self._stored.get(partition) == offset:
                    continue
                try:
                    self._ask(lambda olog, p=partition, o=offset: olog.store_offset(p, self._opts.reference, o))
                except Exception as exc:
                    self.stats["store_failures"] += 1
                    log.warning("ackbridge stream source: storing the offset of %s failed (%s); retried at the "
                                "next commit", partition, type(exc).__name__)
                    continue
                self._stored[partition] = offset
                self.stats["stored"] += 1

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Shown as sources[0].latestOffset in lastProgress: positions and counters, no secrets.
        return {"end": self._latest, **self.stats}

    def stop(self) -> None:
        olog, self._log = self._log, None
        if olog is not None:
            with contextlib.suppress(Exception):
                olog.close()
