"""A planned batch whose rows travel inside their tasks is cut into partitions of at most
``maxPartitionBytes`` (issue 39, item 5): at 25,000 x 4 KiB one ~100 MB task became seven,
with no warning and the same rows, in order."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark

MiB = 1024 * 1024


def _modules() -> tuple[Any, Any, Any]:
    # Imported here: the lowest-versions tier collects this file without the connector.
    import pyarrow as pa

    from ackbridge_spark.push import partition
    from ackbridge_spark.schema import ARROW_SCHEMA

    return pa, partition, ARROW_SCHEMA


def _batch(bodies: list[bytes]) -> Any:
    pa, _, _ = _modules()
    return pa.record_batch([pa.array(bodies, pa.binary()), pa.array(range(len(bodies)), pa.int64())],
                           names=["body", "offset"])


def _rows(parts: list[Any]) -> list[int]:
    _, partition, _ = _modules()
    got: list[int] = []
    for part in parts:
        for batch in partition.from_ipc(part.ipc):
            got.extend(batch.column("offset").to_pylist())
    return got


def test_25000_bodies_of_4_kib_go_as_seven_tasks_of_at_most_16_mib() -> None:
    _, partition, _ = _modules()
    from ackbridge_spark.options import DEFAULT_PARTITION_BYTES

    batch = _batch([b"x" * 4096] * 25_000)
    parts = partition.in_task_partitions(batch, DEFAULT_PARTITION_BYTES)
    assert len(parts) == 7
    assert all(len(p.ipc) <= 16 * MiB for p in parts), [len(p.ipc) for p in parts]
    assert _rows(parts) == list(range(25_000))  # every row once, in order


def test_a_batch_under_the_limit_stays_one_task() -> None:
    _, partition, _ = _modules()
    parts = partition.in_task_partitions(_batch([b"y" * 256] * 25_000), 16 * MiB)
    assert len(parts) == 1 and _rows(parts) == list(range(25_000))


def test_a_row_larger_than_the_limit_travels_whole() -> None:
    _, partition, _ = _modules()
    bodies = [b"a", b"B" * (2 * MiB), b"c"]
    parts = partition.in_task_partitions(_batch(bodies), MiB)
    assert len(parts) == 3 and _rows(parts) == [0, 1, 2]
    read = [bytes(b) for p in parts for rb in partition.from_ipc(p.ipc) for b in rb.column("body").to_pylist()]
    assert read == bodies


def test_an_empty_batch_is_one_empty_partition() -> None:
    _, partition, _ = _modules()
    parts = partition.in_task_partitions(_batch([]), MiB)
    assert len(parts) == 1 and _rows(parts) == []


@pytest.mark.parametrize("given", ["0", "1023", "-5", "16MB"])
def test_max_partition_bytes_refuses_what_cannot_work(given: str) -> None:
    from ackbridge.errors import InvalidOptionError
    from ackbridge_spark.options import parse

    with pytest.raises(InvalidOptionError, match="maxPartitionBytes"):
        parse({"url": "local:///tmp/x.db", "queue": "q", "maxPartitionBytes": given}, check_plugin=False)
