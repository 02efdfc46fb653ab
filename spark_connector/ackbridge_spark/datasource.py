"""The ``ackbridge`` Spark data source class and its registration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from ackbridge.errors import InvalidOptionError
from ackbridge_spark.options import ConnectorOptions, parse
from ackbridge_spark.schema import SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ackbridge_spark.fetch.options import FetchOptions
    from ackbridge_spark.log.options import LogSourceOptions

__all__ = ["NAME", "SCHEMA", "AckbridgeDataSource", "register"]

NAME = "ackbridge"


class AckbridgeDataSource(DataSource):
    """Options: ``url`` (keep the name: Spark redacts it), ``queue``/``topic``/``address``/``subscribe``
    (one name or a comma-separated list), ``prefetch``, ``maxRecordsPerBatch``, ``writeAheadPath``,
    ``failOnDataLoss``, ``username``/``password``; any other option must be one of the broker
    plugin's (e.g. ``lease_timeout``). All are checked at ``load()`` / ``save()`` / ``start()``.

    A URL whose plugin keeps offset logs (RabbitMQ streams) gets the executor-side
    source instead (``minPartitions``, ``startingOffsets``, ``consumerReference``:
    :mod:`ackbridge_spark.log.options`). ``fetch=executors`` on a broker with
    connection-free acks (NATS JetStream) gets the executor-fetch source
    (``minPartitions``, ``fetchIdleMs``, ``fetchTimeoutMs``:
    :mod:`ackbridge_spark.fetch.options`)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Called at load() (unless the user gave a schema): check every option there,
        # before any query starts -- for the source the URL's broker calls for.
        if self._reads_log():
            self._log_options()
        elif self._fetches_on_executors():
            self._fetch_options()
        else:
            self._parsed()
        return SCHEMA

    def _fetches_on_executors(self) -> bool:
        from ackbridge_spark.fetch.options import EXECUTORS, fetch_mode

        return fetch_mode(self.options) == EXECUTORS

    def _fetch_options(self) -> FetchOptions:
        from ackbridge_spark.fetch.options import parse_fetch

        return parse_fetch(self.options)

    def _reads_log(self) -> bool:
        """Whether the URL's plugin keeps offset logs (decided by the registry): the
        stream is then read by offset ranges on the executors."""
        from ackbridge_spark.log.options import keeps_offset_log
        from ackbridge_spark.options import _lower

        return keeps_offset_log(_lower(self.options).get("url") or "")

    def _log_options(self) -> LogSourceOptions:
        from ackbridge_spark.log.options import parse_log

        return parse_log(self.options)

    def _parsed(self) -> ConnectorOptions:
        from ackbridge_spark.fetch.options import refuse_fetch_only
        from ackbridge_spark.log.options import refuse_log_only

        refuse_fetch_only(self.options)
        refuse_log_only(self.options)
        return parse(self.options)

    def _sink_options(self) -> ConnectorOptions:
        parsed = self._parsed()
        if len(parsed.sources) > 1:
            raise InvalidOptionError("the ackbridge sink publishes to one queue/topic/address, not a list "
                                     "(a row's 'topic' column picks another destination)")
        return parsed

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._reads_log():
            from ackbridge_spark.log.source import LogStreamReader

            return LogStreamReader(self._log_options())
        if self._fetches_on_executors():
            from ackbridge_spark.fetch.source import FetchStreamReader

            return FetchStreamReader(self._fetch_options())
        parsed = self._parsed()
        if parsed.parallelism > 1:
            from ackbridge_spark.push.parallel import ParallelStreamReader

            return ParallelStreamReader(parsed)
        from ackbridge_spark.push.source import AckbridgeStreamReader

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
