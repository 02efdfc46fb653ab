"""Helpers of the Spark connector tests: brokers answered broker-side, one session per module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.plugins import registry
from ackbridge.testing import eventually  # noqa: F401  (re-exported for the Spark tests)

VENV_PYTHON = str(Path(sys.executable))
os.environ["PYSPARK_PYTHON"] = VENV_PYTHON
os.environ["PYSPARK_DRIVER_PYTHON"] = VENV_PYTHON

HAVE_JAVA = shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))

RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/"


class Broker:
    """What the tests need from a broker, answered from the broker's side."""

    name = "broker"

    def url(self) -> str:
        raise NotImplementedError

    def new_queue(self) -> str:
        raise NotImplementedError

    def counts(self, queue: str) -> tuple[int, int]:
        """(ready, unacked) as the broker sees them."""
        raise NotImplementedError

    def sever_options(self, after_batches: int) -> dict[str, str]:
        """Options that make the source lose its connection after *after_batches* batches."""
        return {}

    def sever_from_outside(self) -> None:
        """Cut the source's connection from the broker side, if the harness does that."""

    def refusal(self) -> tuple[str, dict[str, str], list[bytes]]:
        """(queue, sink options, rows) such that the broker confirms 9 rows and refuses 1."""
        raise NotImplementedError

    def secret_url(self, canary: str) -> tuple[str, str]:
        """A working URL whose password is a canary, and the canary to search for."""
        raise NotImplementedError

    def publish(self, queue: str, n: int, *, prefix: str = "m", **kwargs: Any) -> list[str]:
        """Publish *n* messages with confirms; return the ids the broker confirmed."""
        ids = [f"{prefix}-{i}" for i in range(n)]
        with ackbridge.connect(self.url()) as conn:
            confirms = [conn.publish(queue, f"{prefix}:{i}".encode(), message_id=mid, **kwargs)
                        for i, mid in enumerate(ids)]
            conn.flush(timeout=60)
            return [c.message_id for c in confirms if c.result().confirmed]  # type: ignore[misc]


class LocalBroker(Broker):
    name = "embedded"

    def __init__(self, root: Path) -> None:
        self.path = root / "broker.db"
        self._conn = ackbridge.connect(self.url())

    def url(self) -> str:
        return f"local://{self.path}"

    def new_queue(self) -> str:
        name = f"q-{uuid.uuid4().hex[:8]}"
        self._conn.declare_queue(name)
        return name

    def counts(self, queue: str) -> tuple[int, int]:
        store = self._conn._transport.store  # type: ignore[attr-defined]
        # The embedded broker returns a dead consumer's leases lazily, on the next
        # poll by anyone; do that poll's reclaim first, as a restarted query would.
        store.reclaim_dead(every=0)
        return store.counts(queue)  # type: ignore[no-any-return]

    def sever_options(self, after_batches: int) -> dict[str, str]:
        return {"testSeverAfterBatches": str(after_batches)}

    def secret_url(self, canary: str) -> tuple[str, str]:
        return self.url().replace("local://", f"local://spark:{canary}@", 1), canary

    def refusal(self) -> tuple[str, dict[str, str], list[bytes]]:
        # The embedded broker refuses bodies over max_message_bytes.
        rows = [b"small"] * 5 + [b"x" * 5000] + [b"small"] * 4
        return self.new_queue(), {"max_message_bytes": "1000"}, rows

    def close(self) -> None:
        self._conn.close()


class RabbitBroker(Broker):
    name = "rabbitmq"

    def __init__(self) -> None:
        self._conn = ackbridge.connect(RABBIT_URL)
        self._created: list[str] = []

    def url(self) -> str:
        return RABBIT_URL

    def new_queue(self) -> str:
        name = f"spark-{uuid.uuid4().hex[:8]}"
        self._conn.declare_queue(name)
        self._created += [name, f"{name}.dlq"]
        return name

    def counts(self, queue: str) -> tuple[int, int]:
        out = subprocess.run(["rabbitmqctl", "-q", "list_queues", "name", "messages_ready",
                              "messages_unacknowledged"], capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == queue:
                return int(parts[1]), int(parts[2])
        return 0, 0

    def sever_from_outside(self) -> None:
        out = subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid", "peer_port"],
                             capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            pid = line.split()[0] if line.split() else ""
            if pid.startswith("<"):
                subprocess.run(["rabbitmqctl", "close_connection", pid, "ackbridge spark test"],
                               capture_output=True, timeout=60)

    def secret_url(self, canary: str) -> tuple[str, str]:
        # RabbitMQ checks the password, so the canary is a real user's password.
        from tests.rabbitmq.harness import AMQP_URL, TEST_PASSWORD, ensure_test_user

        ensure_test_user()
        return AMQP_URL, TEST_PASSWORD

    def refusal(self) -> tuple[str, dict[str, str], list[bytes]]:
        # A queue capped at 9 with overflow=reject-publish: RabbitMQ nacks the 10th
        # publish (a real broker refusal, cheaper than a 16 MiB body per row).
        from tests.rabbitmq.harness import mgmt

        name = f"spark-cap-{uuid.uuid4().hex[:8]}"
        self._created.append(name)
        mgmt("PUT", f"/queues/%2F/{name}", {"durable": True, "auto_delete": False,
                                           "arguments": {"x-max-length": 9, "x-overflow": "reject-publish"}})
        return name, {}, [b"small"] * 10

    def close(self) -> None:
        self._conn.close()
        from tests.rabbitmq.harness import delete_exchange, delete_queue

        for name in self._created:  # leave the shared broker as we found it
            delete_queue(name)
            delete_exchange(f"{name}.dlx")


def rabbit_ready() -> str | None:
    if "amqp" not in registry().adapters:
        return "the ackbridge-rabbitmq plugin is not installed (amqp:// not registered)"
    try:
        ackbridge.connect(RABBIT_URL).close()
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"RabbitMQ on 127.0.0.1:5672 not reachable: {type(exc).__name__}"
    return None


def make_spark(app: str, extra: dict[str, str] | None = None) -> Any:
    from pyspark.sql import SparkSession

    import ackbridge_spark

    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.pyspark.python", VENV_PYTHON)
               .config("spark.sql.streaming.pollingDelay", "20ms"))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    ackbridge_spark.register(spark)
    return spark


def scoreboard(broker: str, fault: str, confirmed: list[str], delivered: list[str], **extra: Any) -> dict[str, Any]:
    """The reliability-scoreboard row (printed; -s shows it)."""
    unique = set(delivered)
    row = {
        "broker": broker, "fault": fault, "confirmed": len(confirmed), "delivered": len(unique),
        "LOST": len(set(confirmed) - unique), "UNEXPECTED": len(unique - set(confirmed)),
        "duplicated": len(delivered) - len(unique), **extra,
    }
    print("SCOREBOARD", row)
    out = os.environ.get("ACKBRIDGE_SCOREBOARD_ROWS")
    if out:  # tests/scoreboard/run.py --spark collects the Spark rows through this file
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    return row


class HarnessBroker(Broker):
    """A broker seen through a plugin's conformance harness (MQTT, AMQP 1.0)."""

    def __init__(self, name: str, harness: Any) -> None:
        self.name = name
        self.harness = harness

    def url(self) -> str:
        return str(self.harness.url(**self.harness.connect_options()))

    def new_queue(self) -> str:
        return str(self.harness.new_queue(dead_letter=False))

    def counts(self, queue: str) -> tuple[int, int]:
        return int(self.harness.ready(queue)), int(self.harness.unacked(queue))

    def publish(self, queue: str, n: int, *, prefix: str = "m", **kwargs: Any) -> list[str]:
        return super().publish(self.harness.publish_target(queue), n, prefix=prefix, **kwargs)

    def close(self) -> None:
        self.harness.cleanup()


@pytest.fixture(params=[pytest.param("mqtt-5", marks=pytest.mark.mqtt),
                        pytest.param("amqp10", marks=pytest.mark.amqp10)])
def harness_broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """MQTT 5 and AMQP 1.0 as Spark test brokers, through their plugins' harnesses."""
    from tests.conftest import require_port

    if request.param == "mqtt-5":
        require_port(1883, "Mosquitto")
        from tests.mqtt.harness import MqttHarness

        b = HarnessBroker("mqtt-5", MqttHarness("5"))
    else:
        require_port(5672, "RabbitMQ (AMQP 1.0)")
        from tests.amqp10.harness import Amqp10Harness

        b = HarnessBroker("amqp10", Amqp10Harness())
    try:
        yield b
    finally:
        b.close()
