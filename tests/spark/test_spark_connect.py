"""The source (two queues, parallelism=2) and the sink over Spark Connect
(``SparkSession.builder.remote("local[2]")``: a local Connect server, the test
as its client)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster_modes import sink_write, source_two_queues_two_readers
from .helpers import VENV_PYTHON

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400),
              # The Connect client imports pandas; pyspark 4.3 warns about pandas >= 3 (docs/spark.md).
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # scripts/setup.sh installs the connector's 'connect' extra (pyspark[connect]): no skip.
    from pyspark.sql import SparkSession

    import ackbridge_spark

    # The local Connect server's workers use PYSPARK_PYTHON (set by .helpers); a client
    # cannot set spark.pyspark.python.
    assert VENV_PYTHON
    session = (SparkSession.builder.remote("local[2]").appName("ackbridge-connect")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    ackbridge_spark.register(session)
    yield session
    session.stop()


def test_source_over_spark_connect(spark: Any, tmp_path: Path) -> None:
    assert type(spark).__module__.startswith("pyspark.sql.connect")
    source_two_queues_two_readers(spark, tmp_path)


def test_sink_over_spark_connect(spark: Any, tmp_path: Path) -> None:
    sink_write(spark, tmp_path)
