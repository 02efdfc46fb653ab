"""The source (two queues, parallelism=2), the stream source (two streams, executors
reading their own ranges) and the sink on local-cluster[2,1,1024]: executors are
separate JVMs with their own Python workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster_modes import large_batches_one_reader, sink_write, source_two_queues_two_readers
from .helpers import make_spark
from .stream_helpers import two_streams_into_parquet

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-local-cluster", master="local-cluster[2,1,1024]")
    yield session
    session.stop()


def test_source_on_local_cluster(spark: Any, tmp_path: Path) -> None:
    assert spark.sparkContext.master.startswith("local-cluster")
    source_two_queues_two_readers(spark, tmp_path)


def test_large_batches_stay_in_their_tasks_on_a_cluster(spark: Any, tmp_path: Path) -> None:
    """Executors are other JVMs here: no task leaves the mark, so no batch goes as a local
    file (ackbridge_spark/push/local_files.py), however large."""
    stats = large_batches_one_reader(spark, tmp_path)
    assert stats["batches_as_files"] == 0, stats


def test_sink_on_local_cluster(spark: Any, tmp_path: Path) -> None:
    sink_write(spark, tmp_path)


@pytest.mark.rabbitmq_streams
def test_stream_source_on_local_cluster(spark: Any, tmp_path: Path) -> None:
    two_streams_into_parquet(spark, tmp_path)
