"""The application-fault rows over every broker they apply to: the scoreboard tier.

    .venv/bin/python -m tests.scoreboard.run --application      # writes the section of docs/scoreboard.md

CI runs each fault on one broker (the ``test_*`` functions beside each row); this
runs the grid. A row that cannot run on a broker prints a failing row naming why,
never a silent gap; a broker the fault does not apply to is left out here and says
why in ``NOT_APPLICABLE``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from ackbridge.testing import BrokerHarness
from ackbridge.urls import redact
from tests.scoreboard.brokers import BROKERS
from tests.scoreboard.checker import ScoreRow, failed_row

#: Brokers a fault does not apply to, and why (printed under the table).
NOT_APPLICABLE = {
    "NATS ack_wait shorter than the handler": "JetStream only: no other broker here redelivers a message while "
                                              "a delivery of it is unsettled on a live connection",
    "competing consumers with retransmitted copies": "RabbitMQ classic and quorum: the brokers here that store "
                                                     "a retransmitted publish twice and share one queue between "
                                                     "competing consumers",
    "shutdown signals": "RabbitMQ classic (the CI row) and quorum, MQTT 5 and 3.1.1, AMQP 1.0. Not the embedded "
                        "broker, whose dead process's leases return when another consumer opens the file, nor "
                        "JetStream, which holds a dead consumer's prefetched deliveries until ack_wait (30 s): "
                        "the row's wait for the broker to take them back does not fit either. The signal handling "
                        "is the core's, the same on every plugin (conformance: "
                        "test_interrupted_work_is_never_dead_lettered runs on all of them)",
}


def _slow_handler(harness: BrokerHarness, broker: str) -> list[ScoreRow]:
    from tests.application_faults.test_slow_handler import row_slow_handler

    # RabbitMQ 3.10's AMQP 1.0 plugin lets a 1 s idle timeout expire on the client's side
    # (docs/broker-quirks.md): that broker's row uses 4 s heartbeats and 40 prefetched.
    if broker.startswith("amqp10"):
        return [row_slow_handler(harness, 60, prefetch=40, heartbeat=4.0)[0]]
    return [row_slow_handler(harness)[0]]


def _shutdown(harness: BrokerHarness, broker: str) -> list[ScoreRow]:
    from tests.application_faults.test_shutdown_signals import VARIANTS, row_shutdown_signal

    return [row_shutdown_signal(harness, variant)[0] for variant in VARIANTS]


def _competing(harness: BrokerHarness, broker: str) -> list[ScoreRow]:
    from tests.application_faults.test_competing_consumers import row_competing_consumers

    return [row_competing_consumers(harness)[0]]


def _ack_after_close(harness: BrokerHarness, broker: str) -> list[ScoreRow]:
    from tests.application_faults.test_ack_after_close import row_ack_after_close

    return [row_ack_after_close(harness)[0]]


def _ack_wait(harness: BrokerHarness, broker: str) -> list[ScoreRow]:
    from tests.application_faults.test_nats_ack_wait_dedupe import row_ack_wait_shorter_than_handler

    return [row_ack_wait_shorter_than_handler(harness)[0]]


#: fault -> (rows on one harness, the brokers of tests.scoreboard.brokers it runs on).
GRID: dict[str, tuple[Callable[[BrokerHarness, str], list[ScoreRow]], tuple[str, ...]]] = {
    "slow handler": (_slow_handler, tuple(entry.name for entry in BROKERS)),
    "shutdown signals": (_shutdown, ("rabbitmq-classic", "rabbitmq-quorum", "mqtt-5", "mqtt-3.1.1",
                                     "amqp10-rabbitmq")),
    "competing consumers with retransmitted copies": (_competing, ("rabbitmq-classic", "rabbitmq-quorum")),
    "NATS ack_wait shorter than the handler": (_ack_wait, ("nats-jetstream",)),
    "ack after close": (_ack_after_close, tuple(entry.name for entry in BROKERS)),
}


def run_application_rows(brokers: list[str] | None = None) -> list[ScoreRow]:
    rows: list[ScoreRow] = []
    for fault, (run, names) in GRID.items():
        for entry in BROKERS:
            if entry.name not in names or (brokers and entry.name not in brokers):
                continue
            harness: Any = None
            try:
                harness = entry.make()
                got = run(harness, entry.name)
            except Exception as exc:
                traceback.print_exc()
                got = [failed_row(entry.name, "consumer", fault, f"{type(exc).__name__}: {redact(str(exc))[:120]}")]
            finally:
                if harness is not None:
                    harness.cleanup()
            for row in got:
                print(" | ".join(row.cells()), flush=True)
            rows += got
    return rows
