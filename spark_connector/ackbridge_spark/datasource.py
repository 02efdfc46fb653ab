"""The ``ackbridge`` Spark data source class and its registration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from ackbridge_spark._options import ConnectorOptions, parse
from ackbridge_spark._schema import SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NAME", "SCHEMA", "AckbridgeDataSource", "register"]

NAME = "ackbridge"


class AckbridgeDataSource(DataSource):
    """Options: ``url`` (keep the name: Spark redacts it), ``queue``/``topic``/``address``,
    ``prefetch``, ``maxRecordsPerBatch``, ``writeAheadPath``, ``username``/``password``;
    any other option goes to the broker plugin (e.g. ``lease_timeout``)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def _parsed(self) -> ConnectorOptions:
        return parse(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from ackbridge_spark.source import AckbridgeStreamReader

        return AckbridgeStreamReader(self._parsed())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ackbridge_spark.sink import AckbridgeBatchWriter

        return AckbridgeBatchWriter(self._parsed())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ackbridge_spark.sink import AckbridgeStreamWriter

        return AckbridgeStreamWriter(self._parsed())


def register(spark: SparkSession) -> None:
    """Make ``format("ackbridge")`` available in *spark*."""
    spark.dataSource.register(AckbridgeDataSource)
