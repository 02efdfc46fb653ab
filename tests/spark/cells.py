"""The Spark fault matrix: which broker x fault cells exist, and which the CI tier runs.

Plain data, shared by the tests (parametrisation) and ``tests/scoreboard/run.py``
(which turns a cell without a row into a failing row, never a silent gap).

Two tiers:

* CI (the normal test run): the sizes the tests always used (30-150 ids) and the
  cells in ``CI``; the other cells are not generated there (time budget on 2 cores).
* scoreboard (``python -m tests.scoreboard.run --spark`` sets ``ACKBRIDGE_SPARK_TIER``):
  every cell below, >= 1000 ids each.
"""

from __future__ import annotations

EARLIER_BROKERS = ("embedded", "rabbitmq-classic", "rabbitmq-quorum", "mqtt-3.1.1", "mqtt-5", "amqp10")
BROKERS = (*EARLIER_BROKERS, "nats")

SOURCE_FAILS_ONCE = "foreachBatch raises once, restart ({mode})"
SOURCE_SIGKILL = "driver SIGKILL mid-batch + restart"
SOURCE_CUT = "connection cut mid-stream"
SINK_REFUSED = "refused publish, then rewrite"
SINK_CUT = "connection cut mid-write, task retry"
SINK_TASK_FAILS = "task fails after publishing, Spark retry"

SOURCE_FAULTS = (SOURCE_FAILS_ONCE.format(mode="plain"), SOURCE_FAILS_ONCE.format(mode="wal"),
                 SOURCE_SIGKILL, SOURCE_CUT)
SINK_FAULTS = (SINK_REFUSED, SINK_CUT, SINK_TASK_FAILS)

#: Cells the broker cannot exhibit (declared in its capability table and docs): the scoreboard
#: shows them as DECLARED GAP rows, never skips them; any other cell without a row is a FAIL row.
DECLARED_GAPS: dict[tuple[str, str], str] = {
    ("mqtt-3.1.1", SINK_REFUSED): "cannot be forced: MQTT 3.1.1 PUBACK has no reason code (Mosquitto "
                                  "PUBACKs even what it drops)",
    ("amqp10", SINK_REFUSED): "cannot be forced: RabbitMQ 3.10 AMQP 1.0 accepts unroutable publishes, and "
                              "a reject-publish queue aborts the connection (framing-error) instead of "
                              "a rejected outcome",
}

#: The CI tier (seconds measured on 2 cores: a SIGKILL cell costs ~60 s, two driver start-ups).
#: NATS JetStream runs its connection-cut cells in CI; the rest of its cells in the scoreboard tier.
CI: dict[str, tuple[str, ...]] = {
    SOURCE_FAILS_ONCE: EARLIER_BROKERS,
    # The embedded broker's driver SIGKILL runs in CI as an exactly-once cell (test_exactly_once.py).
    SOURCE_SIGKILL: ("rabbitmq-classic",),
    SOURCE_CUT: BROKERS,
    SINK_REFUSED: ("embedded", "rabbitmq-classic", "mqtt-5"),
    SINK_CUT: BROKERS,
    SINK_TASK_FAILS: ("embedded", "rabbitmq-quorum", "mqtt-3.1.1", "amqp10"),
}


def cells(role: str) -> list[tuple[str, str]]:
    faults = SOURCE_FAULTS if role == "spark source" else SINK_FAULTS
    return [(broker, fault) for fault in faults for broker in BROKERS]
