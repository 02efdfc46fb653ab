"""Planning the executor-side source's micro-batches: positions, caps and splits.

Pure functions, no broker and no Spark: the stream reader
(:mod:`ackbridge_spark.log.source`) feeds them what the broker said, and
Spark's checkpoint stores what they return.

A *position* is where the query stands in every log it reads:
``{source: {partition: next_offset}}`` -- the configured source (a stream or
a super stream) and, under it, each partition (a stream) with the next
offset to read, as Spark's Kafka source spells ``{topic: {partition: offset}}``.
A micro-batch is the pair ``(start, end)`` of positions; its rows are the
records of ``[start[p], end[p])`` of every partition ``p``.

Determinism is what makes the source exactly-once into Spark's file sink:
a range's records never change in a log, and :func:`split` depends on nothing
but its arguments, so a batch replayed after a driver crash -- planned again
by a fresh process from the checkpoint's two positions -- reads the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from ackbridge.errors import InvalidOptionError
from ackbridge.transport.offset_log import OffsetRange

#: ``{source: {partition: next_offset}}``.
Position = dict[str, dict[str, int]]
#: ``{partition: (first, end)}`` as ``OffsetLog.bounds`` answered.
Bounds = Mapping[str, tuple[int, int]]

#: ``startingOffsets`` values given per partition as JSON, spelled as in Spark's Kafka source.
EARLIEST, LATEST = -2, -1


def canonical(position: Mapping[str, Mapping[str, int]]) -> Position:
    """*position* with sources and partitions in sorted order.

    Spark tells "new data" from "none" by comparing the JSON text of two offsets;
    positions built in different orders (the checkpoint's, a fresh runner's) must
    serialise alike."""
    return {s: {p: int(position[s][p]) for p in sorted(position[s])} for s in sorted(position)}


def parse_position(offset: Mapping[str, object] | str | None) -> Position:
    """A position from Spark (a dict, or its JSON text); None -> empty."""
    if offset is None:
        return {}
    raw = json.loads(offset) if isinstance(offset, str) else offset
    out: Position = {}
    for source, parts in raw.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offset of source {source!r} is not a mapping of partitions: {parts!r}")
        out[str(source)] = {str(p): int(o) for p, o in parts.items()}
    return canonical(out)


@dataclass(frozen=True)
class Starting:
    """Where a partition without a stored offset starts: ``startingOffsets``."""

    #: "earliest" or "latest" for partitions not named in *per_partition*.
    default: str = "earliest"
    #: Partition -> offset (EARLIEST / LATEST allowed), from a JSON ``startingOffsets``.
    per_partition: Mapping[str, int] | None = None

    def offset(self, partition: str, first: int, end: int) -> int:
        given = (self.per_partition or {}).get(partition)
        if given is None:
            given = EARLIEST if self.default == "earliest" else LATEST
        if given == EARLIEST:
            return first
        if given == LATEST:
            return end
        return min(max(given, first), end)  # a stale number still lands inside the log


def parse_starting(text: str | None) -> Starting:
    """``earliest`` (default), ``latest``, or JSON ``{"partition": offset}`` (-2 earliest, -1 latest)."""
    if text is None or not text.strip():
        return Starting()
    low = text.strip().lower()
    if low in ("earliest", "latest"):
        return Starting(low)
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= EARLIEST
                                            for v in raw.values()):
        raise InvalidOptionError("ackbridge option 'startingOffsets' must be 'earliest', 'latest' or JSON like "
                                 '{"stream-a": 1200, "stream-b": -2} (-2: earliest, -1: latest)')
    return Starting("earliest", {str(k): int(v) for k, v in raw.items()})


def allocate(lags: Mapping[str, int], cap: int | None) -> dict[str, int]:
    """How many offsets each partition may advance: everything when the backlog fits
    under *cap* (None: no cap), else *cap* shared in proportion to each partition's
    backlog (Spark's Kafka source shares ``maxOffsetsPerTrigger`` the same way).
    Leftovers of the rounding go to the largest fractions, ties in partition order,
    so the result depends on the arguments only."""
    total = sum(max(0, lag) for lag in lags.values())
    if cap is None or total <= cap:
        return {p: max(0, lag) for p, lag in lags.items()}
    shares: dict[str, int] = {}
    fractions: list[tuple[float, str]] = []
    for p in sorted(lags):
        lag = max(0, lags[p])
        exact = cap * lag / total
        shares[p] = int(exact)
        fractions.append((exact - int(exact), p))
    left = cap - sum(shares.values())
    for _, p in sorted(fractions, key=lambda item: (-item[0], item[1])):
        if left <= 0:
            break
        if shares[p] < max(0, lags[p]):
            shares[p] += 1
            left -= 1
    return shares


def advance(start: Position, bounds_by_source: Mapping[str, Bounds], cap: int | None,
            limit: Position | None = None) -> Position:
    """The end of the next micro-batch: each partition moved toward its log's end
    (or toward *limit*, the target AvailableNow pinned), *cap* offsets at most in all.

    Partitions missing from *start* (a super stream that grew) must be seeded
    by the caller first; a start below the log's first offset (retention removed
    records nobody read) counts from the first offset, so the cap limits what is
    really read. A partition belongs to one source (the reader refuses a query
    listing one log twice, e.g. a stream and the super stream holding it)."""
    lags: dict[str, int] = {}
    froms: dict[str, tuple[str, int]] = {}
    for source, bounds in bounds_by_source.items():
        for partition, (first, end) in bounds.items():
            at = start[source][partition]
            if limit is not None:
                end = min(end, limit.get(source, {}).get(partition, at))
            begin = max(at, first)
            froms[partition] = (source, begin)
            lags[partition] = max(0, end - begin)
    out: Position = {s: dict(parts) for s, parts in start.items()}
    for partition, take in allocate(lags, cap).items():
        source, begin = froms[partition]
        # A start below the first offset moves to it even without records to take:
        # the removed offsets are reported once, not on every trigger.
        out[source][partition] = max(out[source][partition], begin + take)
    return canonical(out)


@dataclass(frozen=True)
class Split:
    """One task's work: a range of one partition, and the source it belongs to."""

    source: str
    range: OffsetRange


def ranges(start: Position, end: Position) -> list[Split]:
    """The non-empty ranges of the batch ``(start, end)``, one per partition that moved.
    A partition new in *end* (absent from *start*) cannot occur: the reader seeds
    every partition into the position it hands Spark before it ever moves."""
    out: list[Split] = []
    for source in sorted(end):
        for partition in sorted(end[source]):
            stop = end[source][partition]
            begin = start.get(source, {}).get(partition, stop)
            if stop > begin:
                out.append(Split(source, OffsetRange(partition, begin, stop)))
    return out


def split(batch: Iterable[Split], min_partitions: int | None) -> list[Split]:
    """At least one split per range; with *min_partitions*, ranges cut further until
    there are that many (or every split is one offset). Each extra cut goes to the
    range whose pieces are largest (ties: the earlier range), so splits come out
    balanced and the result depends on the arguments only."""
    whole = list(batch)
    pieces = [1] * len(whole)
    if min_partitions is not None:
        want = min_partitions - len(whole)
        while want > 0:
            best, size = -1, 1.0
            for i, s in enumerate(whole):
                per = s.range.count / pieces[i]
                if pieces[i] < s.range.count and per > size:
                    best, size = i, per
            if best < 0:
                break  # every range is already cut into single offsets
            pieces[best] += 1
            want -= 1
    out: list[Split] = []
    for s, k in zip(whole, pieces, strict=True):
        r = s.range
        bounds = [r.start + (i * r.count) // k for i in range(k + 1)]
        out.extend(Split(s.source, OffsetRange(r.partition, lo, hi)) for lo, hi in pairwise(bounds) if hi > lo)
    return out
