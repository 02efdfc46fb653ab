"""ackbridge's Spark connector.

``ackbridge_spark.register(spark)`` registers the ``ackbridge`` data source:

* ``spark.readStream.format("ackbridge")`` -- a streaming source that settles
  (acks) a micro-batch's deliveries only after Spark committed that batch;
* ``df.write.format("ackbridge")`` / ``df.writeStream.format("ackbridge")`` --
  a sink whose tasks publish with confirms and fail on any refusal.

See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ackbridge_spark.datasource import NAME, AckbridgeDataSource, register
    from ackbridge_spark.schema import SCHEMA

__all__ = ["NAME", "SCHEMA", "AckbridgeDataSource", "register"]


def __getattr__(name: str) -> Any:
    # Lazy: the package is also the ``ackbridge`` plugin entry point (it adds the
    # ``demo`` command), and every ackbridge.connect() loads the entry points.
    # Importing pyspark and pyarrow there cost seconds on each process start.
    if name in __all__:
        from ackbridge_spark import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module 'ackbridge_spark' has no attribute {name!r}")
