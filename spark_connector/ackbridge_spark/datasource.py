"""The ``ackbridge`` Spark data source class and its registration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from ackbridge.errors import InvalidOptionError
from ackbridge_spark._options import ConnectorOptions, parse
from ackbridge_spark._schema import SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NAME", "SCHEMA", "AckbridgeDataSource", "register"]

NAME = "ackbridge"


class AckbridgeDataSource(DataSource):
    """Options: ``url`` (keep the name: Spark redacts it), ``queue``/``topic``/``address``/``subscribe``
    (one name or a comma-separated list), ``prefetch``, ``maxRecordsPerBatch``, ``writeAheadPath``,
    ``failOnDataLoss``, ``username``/``password``; any other option must be one of the broker
    plugin's (e.g. ``lease_timeout``). All are checked at ``load()`` / ``save()`` / ``start()``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Called at load() (unless the user gave a schema): check every option there,
        # before any query starts.
        self._parsed()
        return SCHEMA

    def _parsed(self) -> ConnectorOptions:
        return parse(self.options)

    def _sink_options(self) -> ConnectorOptions:
        parsed = self._parsed()
        if len(parsed.sources) > 1:
            raise InvalidOptionError("the ackbridge sink publishes to one queue/topic/address, not a list "
                                     "(a row's 'topic' column picks another destination)")
        return parsed

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        parsed = self._parsed()
        if parsed.parallelism > 1:
            from ackbridge_spark.parallel import ParallelStreamReader

            return ParallelStreamReader(parsed)
        from ackbridge_spark.source import AckbridgeStreamReader

        return AckbridgeStreamReader(parsed)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ackbridge_spark.sink import AckbridgeBatchWriter

        return AckbridgeBatchWriter(self._sink_options())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ackbridge_spark.sink import AckbridgeStreamWriter

        return AckbridgeStreamWriter(self._sink_options())


def register(spark: SparkSession) -> None:
    """Make ``format("ackbridge")`` available in *spark*."""
    spark.dataSource.register(AckbridgeDataSource)
