"""``parallelism=N``: N reader processes, N broker connections, >= N partitions per batch.

Where things run: the source's runner process on the driver (see
:mod:`ackbridge_spark.push.source`) starts N reader processes
(:mod:`ackbridge_spark.push.reader_process`) on its first call; each opens its own
broker connection -- competing consumers on the same queues, or, when at
least N sources are listed, each reader its own share of them. The runner
only coordinates: on each trigger it asks every reader for up to
``maxRecordsPerBatch / N`` deliveries (in parallel), and a batch's offset
holds each reader's own offset (``{"seq", "batch", "readers": [...]}``).

Payloads never pass through the runner or the driver JVM: each reader writes
its share of a batch to an Arrow file (under ``writeAheadPath``/reader-i, or a
private temporary directory), and the partitions carry only paths and row
ranges; executors read the files. (So on a cluster of several hosts,
``writeAheadPath`` must be on a filesystem every executor can read.) A batch
of at least N rows is planned as at least N partitions: a reader's file is
split into row ranges when fewer readers had rows.

After Spark commits a batch, each reader settles its own deliveries on its
own connection (the one that received them), exactly as a single reader does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ackbridge.errors import AckbridgeError, DataLossError
from ackbridge_spark.options import ConnectorOptions
from ackbridge_spark.push.local_files import runner_directory
from ackbridge_spark.push.partition import AckbridgePartition, read_partition
from ackbridge_spark.reader_state import OptionsOnlyPickle
from ackbridge_spark.runner import install_sigterm_handler

log = logging.getLogger("ackbridge.spark")


class ReaderProcessError(AckbridgeError):
    """A parallel reader process failed or answered with an error (the query fails)."""


def assign(sources: tuple[str, ...], n: int) -> list[tuple[str, ...]]:
    """Each reader's sources: a share of them when there are at least *n*, else all (competing consumers)."""
    if len(sources) >= n:
        return [sources[i::n] for i in range(n)]
    return [sources] * n


class _Reader:
    """The runner's handle on one reader process."""

    def __init__(self, index: int, options: ConnectorOptions) -> None:
        self.index = index
        env = dict(os.environ)
        # The runner's own sys.path (pyspark's zip, the connector) for the child too.
        env["PYTHONPATH"] = os.pathsep.join(child_path(sys.path))
        self.proc = subprocess.Popen([sys.executable, "-m", "ackbridge_spark.push.reader_process"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.send("init", options)  # answered later: the readers start side by side

    def send(self, *command: Any) -> None:
        assert self.proc.stdin is not None
        try:
            pickle.dump(command, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ReaderProcessError(f"ackbridge reader process {self.index} is gone "
                                     f"(exit code {self.proc.poll()})") from None

    def receive(self) -> Any:
        assert self.proc.stdout is not None
        try:
            answer = pickle.load(self.proc.stdout)
        except EOFError:
            raise ReaderProcessError(f"ackbridge reader process {self.index} ended "
                                     f"(exit code {self.proc.wait()})") from None
        if answer[0] == "ok":
            return answer[1]
        name, text = answer[1], answer[2]
        if name == "DataLossError":
            raise DataLossError(f"{text} (reader {self.index})", "", ())
        raise ReaderProcessError(f"ackbridge reader process {self.index}: {name}: {text}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("stop")
            self.receive()
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def child_path(path: Sequence[str]) -> list[str]:
    """The reader processes' ``sys.path``: the runner's, with zip archives last when the
    interpreter has the same pyspark installed.

    Spark puts ``pyspark.zip`` first on its workers' path. A module imported from a zip
    is compiled from source on every import (zipimport reads no cached bytecode), and
    pyspark is large: each reader process spent ~0.45 s of CPU compiling it at every
    query start (2 cores, pyspark 4.3), out of ~0.9 s for all its imports. An installed
    pyspark of the same version has its bytecode cached, so the readers import that one.
    """
    entries = [p for p in path if p]
    try:
        import pyspark

        version = getattr(pyspark, "__version__", None)
        from_zip = ".zip" in (getattr(pyspark, "__file__", None) or "")
        if not (version and from_zip):
            return entries
        from importlib import metadata

        dist = metadata.distribution("pyspark")
        if dist.version != version or not os.path.exists(str(dist.locate_file("pyspark/__init__.py"))):
            return entries
    except Exception:  # no installed pyspark, or one we cannot read: keep Spark's order
        return entries
    return [p for p in entries if not p.endswith(".zip")] + [p for p in entries if p.endswith(".zip")]


def _ask_all(readers: Sequence[_Reader], commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send each reader its command, then collect the answers: the readers work in parallel."""
    for reader, command in zip(readers, commands, strict=True):
        reader.send(*command)
    answers: list[Any] = []
    error: BaseException | None = None
    for reader in readers:
        try:
            answers.append(reader.receive())
        except BaseException as exc:  # keep every pipe in step before raising
            error = error or exc
            answers.append(None)
    if error is not None:
        raise error
    return answers


def _sub(offset: dict[str, Any] | None, index: int, n: int) -> dict[str, Any]:
    """Reader *index*'s own offset inside a query offset (Spark's batch number with it)."""
    readers = (offset or {}).get("readers") or [{"seq": 0}] * n
    if len(readers) != n:
        raise ReaderProcessError(f"the checkpoint was written with parallelism={len(readers)}, not {n}: "
                                 "keep the parallelism of a query, or start it with a new checkpoint")
    return {**readers[index], "batch": int((offset or {}).get("batch", -1))}


class ParallelStreamReader(OptionsOnlyPickle[ConnectorOptions], DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ConnectorOptions) -> None:
        self._opts = options
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._readers: list[_Reader] = []
        self._tmp: str | None = None
        self._stats: list[dict[str, Any]] = []

    @property
    def n(self) -> int:
        return self._opts.parallelism

    def _ensure_started(self) -> None:
        if self._readers:
            return
        install_sigterm_handler()
        opts = self._opts
        base = opts.write_ahead_path
        if base is None:
            # Named by this runner's pid, so the next runner removes it if this one is killed.
            self._tmp = base = runner_directory()
        shares = assign(opts.sources, self.n)
        try:
            for i in range(self.n):
                # Files in the private temporary directory only carry payloads to the executors:
                # it is removed at stop and no restarted query replays from it, so no fsync.
                sub = dataclasses.replace(opts, sources=shares[i], parallelism=1,
                                          write_ahead_path=os.path.join(base, f"reader-{i}"),
                                          write_ahead_durable=opts.write_ahead_path is not None)
                self._readers.append(_Reader(i, sub))
            for reader in self._readers:
                reader.receive()  # connected and subscribed
        except BaseException:
            self.stop()
            raise
        log.info("ackbridge source: %d reader processes, sources per reader: %s", self.n, shares)

    # ---- DataSourceStreamReader -------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        return {"seq": 0, "batch": -1, "readers": [{"seq": 0} for _ in range(self.n)]}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self._ensure_started()
        _ask_all(self._readers, [("available_now",)] * self.n)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._ensure_started()
        if isinstance(limit, ReadAllAvailable):
            cap = 1 << 62
        else:
            total = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else self._opts.max_records_per_batch
            cap = max(1, -(-total // self.n))
        answers = _ask_all(self._readers, [("latest", _sub(start, i, self.n), cap) for i in range(self.n)])
        ends = [offset for offset, _stats in answers]
        self._stats = [stats for _offset, stats in answers]
        batch = int(start.get("batch", -1))
        starts = [_sub(start, i, self.n) for i in range(self.n)]
        moved = any(int(e.get("seq", 0)) != int(s.get("seq", 0)) for e, s in zip(ends, starts, strict=True))
        if not moved and batch >= 0:
            return start
        readers = [{k: v for k, v in e.items() if k != "batch"} for e in ends]
        return {"seq": sum(int(r.get("seq", 0)) for r in readers), "batch": batch + 1 if moved else 0,
                "readers": readers}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._ensure_started()
        commands = [("partitions", _sub(start, i, self.n), _sub(end, i, self.n)) for i in range(self.n)]
        found: list[tuple[AckbridgePartition, int]] = []
        for i, parts in enumerate(_ask_all(self._readers, commands)):
            rows = int(_sub(end, i, self.n).get("seq", 0)) - int(_sub(start, i, self.n).get("seq", 0))
            found.extend((p, rows) for p in parts)
        return split_to(found, self.n)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        if not self._readers:
            return
        self._stats = _ask_all(self._readers, [("commit", _sub(end, i, self.n)) for i in range(self.n)])

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Counters summed over the readers (shown as sources[0].latestOffset in lastProgress).
        total: dict[str, Any] = {"readers": len(self._readers)}
        for stats in self._stats:
            for key, value in (stats or {}).items():
                if isinstance(value, int):
                    total[key] = total.get(key, 0) + value
        return total

    def stop(self) -> None:
        readers, self._readers = self._readers, []
        for reader in readers:
            reader.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def split_to(found: list[tuple[AckbridgePartition, int]], n: int) -> list[AckbridgePartition]:
    """At least *n* partitions when there are at least *n* rows: the largest share is
    split into row ranges of its file until there are enough."""
    parts = [(p, rows) for p, rows in found]
    total = sum(rows for _, rows in parts)
    while len(parts) < n and total >= n:
        parts.sort(key=lambda item: item[1])
        biggest, rows = parts.pop()
        if rows < 2 or biggest.path is None:
            parts.append((biggest, rows))
            break
        lo, hi = biggest.rows or (0, rows)
        mid = lo + (hi - lo) // 2
        parts += [(AckbridgePartition(path=biggest.path, rows=(lo, mid)), mid - lo),
                  (AckbridgePartition(path=biggest.path, rows=(mid, hi)), hi - mid)]
    return [p for p, _ in parts]
