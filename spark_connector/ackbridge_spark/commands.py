"""The ``ackbridge`` plugin hooks of the Spark connector: it registers ``demo``."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl


@hookimpl
def ackbridge_register_commands(register: Callable[..., None]) -> None:
    from ackbridge_spark.demo import demo

    register("demo", demo, help="Publish N messages, stream them through Spark into Parquet with "
                                "settle-after-commit, and print who got what.")
