"""Helpers of the Spark connector tests: brokers answered broker-side, one session per module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import ackbridge
from ackbridge.plugins import registry
from ackbridge.testing import eventually  # also re-exported for the Spark tests
from ackbridge.testing.faults import transport_of
from ackbridge.testing.proxy import FaultProxy
from tests.scoreboard.checker import History, score

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

    def target(self, queue: str) -> str:
        """Where to publish so that messages land in *queue*."""
        return queue

    def cut_url(self) -> str:
        """The URL a Spark query uses when sever_from_outside() must reach its connection."""
        return self.url()

    def proxied_url(self) -> tuple[str, FaultProxy | None]:
        """A URL through a fresh FaultProxy (None for a broker without a socket); close the proxy after."""
        url = self.url()
        port = urlsplit(url).port
        if port is None:
            return url, None
        proxy = FaultProxy(port)
        return url.replace(f":{port}", f":{proxy.port}", 1), proxy

    def refused_destination(self, queue: str) -> tuple[str | None, dict[str, str], bytes | None]:
        """(per-row destination, sink options, body) that make the broker refuse one row.

        ``ValueError`` when this broker cannot be made to refuse (a declared gap)."""
        raise ValueError(f"{self.name}: no way to make the broker refuse a publish")

    def close(self) -> None:
        """Delete what new_queue created."""

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
            # The body is the id too: MQTT 3.1.1 carries no message id.
            confirms = [conn.publish(queue, mid.encode(), message_id=mid, **kwargs) for mid in ids]
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
        store = transport_of(self._conn).store  # type: ignore[attr-defined]
        # The embedded broker returns a dead consumer's leases lazily, on the next
        # poll by anyone; do that poll's reclaim first, as a restarted query would.
        store.reclaim_dead(every=0)
        return store.counts(queue)  # type: ignore[no-any-return]

    def sever_options(self, after_batches: int) -> dict[str, str]:
        return {"testSeverAfterBatches": str(after_batches)}

    def secret_url(self, canary: str) -> tuple[str, str]:
        return self.url().replace("local://", f"local://spark:{canary}@", 1), canary

    def refused_destination(self, queue: str) -> tuple[str | None, dict[str, str], bytes | None]:
        # The embedded broker's refusal hook: bodies over max_message_bytes.
        return None, {"max_message_bytes": "1000"}, b"x" * 5000

    def refusal(self) -> tuple[str, dict[str, str], list[bytes]]:
        # The embedded broker refuses bodies over max_message_bytes.
        rows = [b"small"] * 5 + [b"x" * 5000] + [b"small"] * 4
        return self.new_queue(), {"max_message_bytes": "1000"}, rows

    def close(self) -> None:
        self._conn.close()


class RabbitBroker(Broker):
    def __init__(self, queue_type: str = "classic") -> None:
        self.queue_type = queue_type
        self.name = f"rabbitmq-{queue_type}"
        self._conn = ackbridge.connect(self.url())
        self._created: list[str] = []
        self._proxy: FaultProxy | None = None

    def url(self) -> str:
        return RABBIT_URL if self.queue_type == "classic" else f"{RABBIT_URL}?queue_type={self.queue_type}"

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

    def cut_url(self) -> str:
        # Through a proxy, so sever_from_outside() closes exactly this query's
        # connections (by peer port), never another test's on the shared broker.
        url, self._proxy = self.proxied_url()
        return url

    def sever_from_outside(self) -> None:
        assert self._proxy is not None, "use cut_url() for the query whose connection is cut"
        ports = {str(p) for p in self._proxy.upstream_ports()}
        out = subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid", "peer_port"],
                             capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].startswith("<") and parts[1] in ports:
                subprocess.run(["rabbitmqctl", "close_connection", parts[0], "ackbridge spark test"],
                               capture_output=True, timeout=60)

    def secret_url(self, canary: str) -> tuple[str, str]:
        # RabbitMQ checks the password, so the canary is a real user's password.
        from tests.rabbitmq.harness import AMQP_URL, TEST_PASSWORD, ensure_test_user

        ensure_test_user()
        return AMQP_URL, TEST_PASSWORD

    def refused_destination(self, queue: str) -> tuple[str | None, dict[str, str], bytes | None]:
        # A mandatory publish nobody routes: Basic.Return, a refused confirm. (A quorum
        # queue's x-overflow=reject-publish is not usable here: RabbitMQ 3.10 lets a
        # pipelined burst overshoot x-max-length, see docs/broker-quirks.md.)
        return f"amq.direct/nowhere-{uuid.uuid4().hex[:8]}", {}, None

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
        if self._proxy is not None:
            self._proxy.close()
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


def make_spark(app: str, extra: dict[str, str] | None = None, master: str = "local[2]") -> Any:
    from pyspark.sql import SparkSession

    import ackbridge_spark

    builder = (SparkSession.builder.master(master).appName(app)
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


SCOREBOARD_ROWS = os.environ.get("ACKBRIDGE_SCOREBOARD_ROWS")
#: ``python -m tests.scoreboard.run --spark`` sets this: every broker, >= 1000 ids per cell.
SCOREBOARD_TIER = os.environ.get("ACKBRIDGE_SPARK_TIER") == "scoreboard"


def ids_per_cell(ci: int) -> int:
    """The CI tier's size, or at least 1000 ids in the scoreboard tier."""
    return max(ci, 1000) if SCOREBOARD_TIER else ci


def write_row(row: dict[str, Any]) -> None:
    if SCOREBOARD_ROWS:  # tests/scoreboard/run.py --spark collects the Spark rows through this file
        with open(SCOREBOARD_ROWS, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


def scoreboard(broker: str, fault: str, confirmed: list[str], delivered: list[str], *,
               attempted: list[str] | None = None, role: str = "spark source", injections: int = 1,
               elapsed_s: float = 0.0, **extra: Any) -> dict[str, Any]:
    """The reliability-scoreboard row, counted by tests/scoreboard/checker.py (printed; -s shows it)."""
    history = History(attempted=set(confirmed if attempted is None else attempted), confirmed=set(confirmed),
                      injections=injections, elapsed_s=elapsed_s)
    history.delivered.update(delivered)
    counted = score(broker, role, fault, history)
    row = {
        "broker": broker, "role": role, "fault": fault, "injections": counted.injections,
        "attempted": counted.attempted, "confirmed": counted.confirmed, "delivered": counted.delivered,
        "LOST": counted.lost, "UNEXPECTED": counted.unexpected, "duplicated": counted.duplicated,
        **extra,
    }
    if elapsed_s:
        row["msgs/s"] = counted.msgs_per_s
    print("SCOREBOARD", row)
    CELL_ROWS.append(row)
    write_row(row)
    return row


#: Rows written by the running test (the cell fixture marks them failed if the test fails).
CELL_ROWS: list[dict[str, Any]] = []


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

    def target(self, queue: str) -> str:
        return str(self.harness.publish_target(queue))

    def publish(self, queue: str, n: int, *, prefix: str = "m", **kwargs: Any) -> list[str]:
        return super().publish(self.harness.publish_target(queue), n, prefix=prefix, **kwargs)

    def sever_from_outside(self) -> None:
        # The clients reach the broker through the harness's own proxy (MQTT: the
        # packet tap; AMQP 1.0: a FaultProxy), so only this test's connections are cut.
        tap = getattr(self.harness, "tap", None)
        if tap is not None:
            with tap.lock:
                live = {c.client_id for c in tap.conns if not c.closed}
            tap.cut(live)
        else:
            self.harness.proxy.reset()

    def refused_destination(self, queue: str) -> tuple[str | None, dict[str, str], bytes | None]:
        if self.name == "mqtt-5":
            # Mosquitto answers a v5 PUBLISH to $SYS/... with PUBACK 0x87 (not authorized).
            return f"$SYS/ackbridge-refused-{uuid.uuid4().hex[:8]}", {}, None
        if self.name == "nats":
            # No stream captures the subject: JetStream has no responder, the publish is refused.
            return str(self.harness.unroutable_target()), {}, None
        return super().refused_destination(queue)

    def close(self) -> None:
        self.harness.cleanup()


@pytest.fixture(params=[pytest.param("mqtt-5", marks=pytest.mark.mqtt),
                        pytest.param("amqp10", marks=pytest.mark.amqp10),
                        pytest.param("nats", marks=pytest.mark.nats)])
def harness_broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """MQTT 5, AMQP 1.0 and NATS JetStream as Spark test brokers, through their plugins' harnesses."""
    from tests.conftest import require_port

    if request.param == "nats":
        require_port(4222, "NATS (JetStream)")
        from tests.nats.harness import NatsHarness

        b: Broker = HarnessBroker("nats", NatsHarness())
    elif request.param == "mqtt-5":
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


# ---- the fault matrix (tests/spark/cells.py) ------------------------------------------
_MARKS = {"rabbitmq": pytest.mark.rabbitmq, "mqtt": pytest.mark.mqtt, "amqp10": pytest.mark.amqp10,
          "nats": pytest.mark.nats}


def broker_params(fault: str) -> list[Any]:
    """``fault_broker`` params of one fault: every broker in the scoreboard tier, the CI list otherwise."""
    from tests.spark.cells import BROKERS, CI, DECLARED_GAPS

    chosen = BROKERS if SCOREBOARD_TIER else CI[fault]
    return [pytest.param(name, id=name, marks=[m for k, m in _MARKS.items() if name.startswith(k)])
            for name in chosen if (name, fault) not in DECLARED_GAPS]


def make_broker(name: str, tmp_path: Path) -> Broker:
    """One of tests/spark/cells.py's brokers; fails in CI (skips locally) when it is not there."""
    from tests.conftest import IN_CI, require_port

    if name == "embedded":
        return LocalBroker(tmp_path)
    if name.startswith("rabbitmq"):
        why = rabbit_ready()
        if why:
            if IN_CI:
                pytest.fail(f"RabbitMQ is needed in CI: {why}")
            pytest.skip(why)
        return RabbitBroker(name.split("-", 1)[1])
    if name.startswith("mqtt"):
        require_port(1883, "Mosquitto")
        from tests.mqtt.harness import MqttHarness

        return HarnessBroker(name, MqttHarness(name.split("-", 1)[1]))
    if name == "nats":
        require_port(4222, "NATS (JetStream)")
        from tests.nats.harness import NatsHarness

        return HarnessBroker("nats", NatsHarness())
    require_port(5672, "RabbitMQ (AMQP 1.0)")
    from tests.amqp10.harness import Amqp10Harness

    return HarnessBroker("amqp10", Amqp10Harness())


@pytest.fixture
def fault_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    """The broker of a fault cell (parametrised indirectly with broker_params())."""
    b = make_broker(request.param, tmp_path)
    try:
        yield b
    finally:
        b.close()


def spark_cell(role: str, fault: str) -> Any:
    """Name the scoreboard cell a test fills (``{param}`` placeholders take its parameters)."""
    def mark(fn: Any) -> Any:
        fn.spark_cell = (role, fault)
        return fn
    return mark


@pytest.fixture
def cell(request: pytest.FixtureRequest) -> Iterator[None]:
    """List it first: a cell whose test fails, errors or skips still gets a (failing) row."""
    start = len(CELL_ROWS)
    yield
    if not SCOREBOARD_ROWS:
        return
    node = request.node
    report = getattr(node, "rep_call", None) or getattr(node, "rep_setup", None)
    if report is not None and report.passed and report.when == "call" and len(CELL_ROWS) > start:
        return
    from ackbridge.urls import redact

    role, fault = request.function.spark_cell
    params = dict(getattr(node, "callspec", None).params) if hasattr(node, "callspec") else {}
    if report is None:
        error = "did not run"
    elif report.skipped:
        error = f"skipped: {report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr}"
    else:
        lines = [line for line in str(report.longreprtext).splitlines() if line.startswith("E ")]
        error = (lines[0][1:].strip() if lines else "test failed")
    write_row({"broker": params.get("fault_broker", "?"), "role": role, "fault": fault.format(**params),
               "error": redact(error)[:160], "nodeid": node.nodeid})


def runner_is_ours(directory_name: str) -> bool:
    """Whether the source runner that made the local-files directory *directory_name*
    (``ackbridge-spark-files-<pid>-...``: ackbridge_spark/push/local_files.py) descends from
    this process: other xdist workers' queries make such directories too."""
    from ackbridge_spark.push.local_files import runner_pid

    pid = runner_pid(directory_name) or 0
    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid, after "(command)"
    return False


def removed_once_its_runner_is_gone(directories: Iterable[Path]) -> None:
    """Each runner's files directory is gone once its runner is: removed by its stop(), or,
    when Spark killed the runner at query stop before that ran (pyspark's daemon SIGKILLs
    a worker the JVM destroys), by the sweep the next runner makes (``remove_abandoned``)."""
    from ackbridge.transport.files import process_alive
    from ackbridge_spark.push.local_files import remove_abandoned, runner_pid

    for directory in directories:
        pid = runner_pid(directory.name)
        assert pid is not None, directory

        eventually(lambda pid=pid: not process_alive(pid), 60, message=f"runner {pid} ended")
        remove_abandoned(str(directory.parent))  # what the next runner does first
        assert not directory.exists(), f"{directory} left behind"
