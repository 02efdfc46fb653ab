"""Canary-password sweep: every failure path of every plugin, and the Spark source.

Each broker URL carries a unique canary password. Every failure path is driven
(wrong password, unreachable port, TCP reset through FaultProxy, TLS failure,
bad options, stale and double settles, a refused publish, an unknown confirm),
and the canary must appear in NO log record (every logger at DEBUG, pika / paho /
proton / aiormq included), no exception (str, repr, the whole __cause__ /
__context__ chain, traceback.format_exception), no thread crash report, no
warning, and no repr of a connection, transport, consumer, publisher, delivery,
confirm or outcome. For Spark: explain(True), lastProgress / recentProgress as
JSON, the event log, and the error of a query whose password is wrong.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.testing.faults import faults, transport_of
from ackbridge.testing.harness import eventually
from ackbridge.testing.proxy import FaultProxy
from tests.conftest import IN_CI, require_port

CANARY = f"Cnry{uuid.uuid4().hex[:12]}Pw"
LOGGERS = ("", "ackbridge", "ackbridge_mqtt", "ackbridge.rabbitmq", "ackbridge.amqp10", "pika", "paho", "proton",
           "aiormq", "aio_pika", "asyncio", "py4j", "urllib3")


class Sweep:
    """Everything a failure path showed, to search for the canary."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def add(self, where: str, text: object) -> None:
        with self.lock:
            self.texts.append((where, str(text)))

    def exc(self, where: str, exc: BaseException) -> None:
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            self.add(f"{where}: str", str(e))
            self.add(f"{where}: repr", repr(e))
            self.add(f"{where}: args", repr(getattr(e, "args", ())))
            todo += [e.__cause__, e.__context__]
        self.add(f"{where}: traceback", "".join(traceback.format_exception(exc)))

    def objects(self, where: str, *objs: object) -> None:
        for obj in objs:
            self.add(f"{where}: repr {type(obj).__name__}", repr(obj))
            self.add(f"{where}: str {type(obj).__name__}", str(obj))

    @contextlib.contextmanager
    def path(self, name: str, *expected: type[BaseException]) -> Iterator[None]:
        """Run one failure path; record whatever it raises."""
        try:
            yield
        except BaseException as exc:  # recorded and checked below
            self.exc(name, exc)
            if expected and not isinstance(exc, expected):
                raise

    def leaks(self) -> list[str]:
        return [f"{where}: ...{text[max(0, text.find(CANARY) - 120):text.find(CANARY) + 40]}..."
                for where, text in self.texts if CANARY in text and not _py4j_wire_trace(where, text)]


def _py4j_wire_trace(where: str, text: str) -> bool:
    """py4j logs every gateway command and answer at DEBUG, so the caller's own
    ``.option("url", ...)`` call shows up there verbatim; no library between the
    caller and py4j can change that (docs/broker-quirks.md: keep py4j at INFO)."""
    return where == "log py4j.clientserver" and ("Command to send" in text or "Answer received" in text)


class _Capture(logging.Handler):
    def __init__(self, sweep: Sweep) -> None:
        super().__init__(logging.DEBUG)
        self.sweep = sweep
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception as exc:  # a record that cannot format is still searched
            text = f"{record.msg!r} {record.args!r} ({exc})"
        self.sweep.add(f"log {record.name}", text + f" args={record.args!r}")


@pytest.fixture
def sweep() -> Iterator[Sweep]:
    found = Sweep()
    handler = _Capture(found)
    root = logging.getLogger()
    names = set(LOGGERS) | set(logging.root.manager.loggerDict)
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.DEBUG)
    root.addHandler(handler)
    previous_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        found.add("thread crash", "".join(traceback.format_exception(args.exc_type, args.exc_value,
                                                                     args.exc_traceback)))

    threading.excepthook = hook
    # "always": every warning's text is searched, even one the suite ignores or makes an error.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    threading.excepthook = previous_hook
    root.removeHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    for w in caught:
        found.add("warning", f"{w.category.__name__}: {w.message}")
    assert found.texts, "the sweep saw nothing: the capture is broken"
    assert found.leaks() == []
    # Recording must not hide them: each is issued again under the suite's own filters, so an
    # unclosed socket (ResourceWarning) fails this test as it would any other.
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, module=_module_of(w.filename),
                               source=w.source)


def _module_of(filename: str) -> str:
    """The module a warning came from, for filters that name one (``ignore::...:pyspark.*``):
    a recorded warning keeps only its file."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return filename.removesuffix(".py")  # what warn_explicit assumes without one


# ---- brokers -----------------------------------------------------------------------------------
class Target:
    """One plugin under test: URLs with the canary, a queue, how to break a connection."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.tmp = tmp
        self.user = f"canary-{uuid.uuid4().hex[:8]}"
        self.proxy: FaultProxy | None = None
        self.queues: list[str] = []
        self.options: dict[str, Any] = {}
        if kind == "embedded":
            self.scheme, self.port, self.tls_scheme = "local", 0, None
        elif kind == "rabbitmq":
            require_port(5672, "RabbitMQ")
            require_port(15672, "RabbitMQ management API")
            self.scheme, self.port, self.tls_scheme = "amqp", 5672, "amqps"
            self.options = {"reconnect_max_delay": 0.3, "connect_timeout": 5}
        elif kind.startswith("mqtt"):
            require_port(1883, "Mosquitto")
            self.scheme, self.port, self.tls_scheme = "mqtt", 1883, "mqtts"
            self.options = {"protocol": kind.split("-", 1)[1], "connect_timeout": 5}
        elif kind == "nats":
            # The local nats-server has no authorization: it ignores the credentials, so the
            # canary rides along in the URL of a working connection.
            require_port(4222, "NATS (JetStream)")
            self.scheme, self.port, self.tls_scheme = "nats", 4222, "nats+tls"
            self.options = {"reconnect_max_delay": 0.3, "connect_timeout": 5}
        else:
            require_port(5672, "RabbitMQ (AMQP 1.0)")
            require_port(15672, "RabbitMQ management API")
            self.scheme, self.port, self.tls_scheme = "amqp10", 5672, "amqp10s"
            self.options = {"reconnect_max_delay": 0.3, "connect_timeout": 5}
        if kind in ("rabbitmq", "amqp10"):
            from tests.amqp10.harness import create_user

            create_user(self.user, CANARY)
        if kind != "embedded":
            self.proxy = FaultProxy(self.port)

    def url(self, *, password: str = CANARY, port: int | None = None, scheme: str | None = None,
            query: str = "") -> str:
        scheme = scheme or self.scheme
        if self.kind == "embedded":
            return f"local://{self.user}:{password}@{self.tmp}/broker.db" + (f"?{query}" if query else "")
        port = port if port is not None else (self.proxy.port if self.proxy else self.port)
        path = "" if self.kind.startswith("mqtt") or self.kind in ("amqp10", "nats") else "/"
        return f"{scheme}://{self.user}:{password}@127.0.0.1:{port}{path}" + (f"?{query}" if query else "")

    def new_queue(self, conn: ackbridge.Connection) -> str:
        name = f"canary-{uuid.uuid4().hex[:10]}"
        if self.kind == "amqp10":
            from tests.amqp10.harness import declare

            declare(name)
            self.queues.append(name)
            return f"/amq/queue/{name}"
        conn.declare_queue(name)
        self.queues.append(name)
        return name

    def unroutable(self) -> str:
        return {"embedded": "", "rabbitmq": f"amq.direct/nowhere-{uuid.uuid4().hex[:6]}",
                "amqp10": "/amq/queue/no/#", "nats": f"canary.nostream.{uuid.uuid4().hex[:6]}"}.get(self.kind, "a/#")

    def cut(self, conn: ackbridge.Connection) -> None:
        if self.proxy is None:
            faults(conn).sever("test cut")  # type: ignore[attr-defined]
            return
        before = transport_of(conn).generation  # type: ignore[attr-defined]
        self.proxy.reset()
        eventually(lambda: transport_of(conn).generation != before, timeout=15, message="client saw the reset")  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.kind in ("rabbitmq", "amqp10"):
            from tests.amqp10.harness import delete, delete_user

            delete_user(self.user)
            for name in self.queues:
                delete(name)
                delete(f"{name}.dlq")
                with contextlib.suppress(Exception):
                    from tests.rabbitmq.harness import delete_exchange

                    delete_exchange(f"{name}.dlx")
        elif self.kind == "nats":
            from tests.nats.harness import NatsHarness

            cleaner = NatsHarness()  # deletes the streams named below on cleanup()
            from ackbridge_nats.naming import DEFAULT_DEAD_LETTER_SUBJECT, dead_letter_subject, stream_name

            for name in self.queues:
                cleaner.streams.append(stream_name(name))
                cleaner.streams.append(stream_name(dead_letter_subject(DEFAULT_DEAD_LETTER_SUBJECT, name)))
            cleaner.cleanup()
        elif self.kind.startswith("mqtt"):
            from ackbridge_mqtt.sessions import dead_letter_topic, derived_session_id
            from tests.mqtt.harness import delete_session

            for name in self.queues:
                delete_session(derived_session_id(name))
                delete_session(derived_session_id(dead_letter_topic(None, name)))


KINDS = [pytest.param("embedded", id="embedded"),
         pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
         pytest.param("mqtt-5", id="mqtt-5", marks=pytest.mark.mqtt),
         pytest.param("mqtt-3.1.1", id="mqtt-3.1.1", marks=pytest.mark.mqtt),
         pytest.param("amqp10", id="amqp10", marks=pytest.mark.amqp10),
         pytest.param("nats", id="nats", marks=pytest.mark.nats)]


@pytest.fixture(params=KINDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    t = Target(request.param, tmp_path)
    try:
        yield t
    finally:
        t.close()


def test_no_failure_path_shows_the_canary(target: Target, sweep: Sweep) -> None:
    err = ackbridge.AckbridgeError
    opts = target.options
    once = {"reconnect": False} if target.kind in ("rabbitmq", "amqp10") else {}

    def connect(url: str, **extra: Any) -> ackbridge.Connection:
        return ackbridge.connect(url, **{**opts, **extra})

    # Configuration paths: bad option values, unknown options, a CA file that does not exist.
    with sweep.path("bad option value", ackbridge.InvalidOptionError):
        connect(target.url(query="prefetch=abc"))
    with sweep.path("unknown option", ackbridge.InvalidOptionError):
        connect(target.url(query="prefech=5"))
    with sweep.path("malformed URL", ackbridge.InvalidURLError):
        connect(target.url().replace("127.0.0.1:", "127.0.0.1:99999", 1) if target.proxy else
                f"local://u:{CANARY}@[::1/x")
    if target.tls_scheme is not None:
        ca = "tls_ca_file"
        with sweep.path("TLS: missing CA file", err):
            connect(target.url(scheme=target.tls_scheme, port=target.port), **{ca: str(target.tmp / "no.pem")})
        with sweep.path("TLS handshake against a plain port", err):
            connect(target.url(scheme=target.tls_scheme, port=target.port), **once)
        # Unreachable port, and (where the broker checks it) a wrong password.
        with sweep.path("unreachable port", err):
            connect(target.url(port=1), **once)
        if target.kind in ("rabbitmq", "amqp10"):
            with sweep.path("wrong password", err):
                connect(target.url(password=CANARY + "-wrong", port=target.port), reconnect=False)

    # A working connection (through the fault proxy) whose URL holds the canary.
    with connect(target.url(), confirm_timeout=2) as conn:
        queue = target.new_queue(conn)
        publisher = conn.publisher()
        confirms = [conn.publish(queue, f"m{i}".encode()) for i in range(3)]
        for confirm in confirms:
            assert confirm.result(timeout=30).confirmed
        refused = None
        with sweep.path("refused publish", err):
            refused = conn.publish(target.unroutable(), b"nowhere")
            sweep.objects("refused", refused, refused.result(timeout=30))
        if target.kind == "embedded":
            with connect(target.url(query="max_message_bytes=4")) as small, sweep.path("oversized", err):
                outcome = small.publish(queue, b"too big").result(timeout=30)
                sweep.objects("oversized", outcome)
        consumer = conn.consume(queue, prefetch=3)
        first = consumer.get(timeout=20)
        second = consumer.get(timeout=20)
        assert first is not None and second is not None
        first.ack()
        with sweep.path("double settle", ackbridge.AlreadySettledError):
            first.ack()
        sweep.objects("objects", conn, transport_of(conn), consumer, publisher, first, second, confirms[0],
                      confirms[0].result())
        # TCP reset (or the embedded broker's sever): the held delivery goes stale.
        target.cut(conn)
        with sweep.path("stale settle", ackbridge.StaleDeliveryError):
            second.ack()
        # An unknown confirm: replies held, then the connection is reset.
        if target.proxy is not None:
            with sweep.path("publish while reconnecting", err):
                conn.publish(queue, b"early").result(timeout=30)
            eventually(lambda: _works(conn, queue), timeout=30, message="reconnected")
            with sweep.path("unknown confirm", err), target.proxy.held_replies():
                pending = conn.publish(queue, b"unknown")
                time.sleep(0.2)
                target.proxy.reset()
                sweep.objects("unknown confirm", pending, pending.result(timeout=30))
        else:
            with sweep.path("unknown confirm", err):
                faults(conn).hold_writes(True)  # type: ignore[attr-defined]
                pending = conn.publish(queue, b"unknown")
                faults(conn).sever("test")  # type: ignore[attr-defined]
                sweep.objects("unknown confirm", pending, pending.result(timeout=30))
                faults(conn).hold_writes(False)  # type: ignore[attr-defined]
        eventually(lambda: _works(conn, queue), timeout=30, message="publish works again after the reset")
        with sweep.path("consumer close", err):
            consumer.close()
        sweep.objects("after", conn, consumer, first, second)
    sweep.objects("closed", conn)


def _works(conn: ackbridge.Connection, queue: str) -> bool:
    try:
        return conn.publish(queue, b"after").result(timeout=30).confirmed
    except ackbridge.ConnectionLostError:
        return False


# ---- Spark ----------------------------------------------------------------------------------------
def require_spark() -> None:
    """PySpark and Java: missing, a failure under CI=true (never a silent skip), a skip locally."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        message = f"PySpark is not installed ({exc})"
    else:
        from tests.spark.helpers import HAVE_JAVA

        if HAVE_JAVA:
            return
        message = "Java is needed for the Spark tests"
    if IN_CI:
        pytest.fail(message + " -- CI needs it (scripts/setup.sh installs it)")
    pytest.skip(message + " (set CI=true to make this a failure)")


@pytest.fixture
def spark_needed() -> None:
    """Asked for before ``sweep``, so a missing Spark stops the test before the sweep starts."""
    require_spark()


def test_spark_source_never_shows_the_canary(spark_needed: None, tmp_path: Path, sweep: Sweep,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A RabbitMQ user whose password is the canary, read by a streaming query."""
    require_port(5672, "RabbitMQ")
    require_port(15672, "RabbitMQ management API")
    from tests.amqp10.harness import create_user, delete, delete_user
    from tests.spark.helpers import make_spark

    user, queue = f"canary-spark-{uuid.uuid4().hex[:8]}", f"canary-spark-{uuid.uuid4().hex[:8]}"
    create_user(user, CANARY)
    logs, ck = tmp_path / "eventlog", tmp_path / "ck"
    logs.mkdir()
    url = f"amqp://{user}:{CANARY}@127.0.0.1:5672/"
    spark = make_spark("ackbridge-canary-sweep", {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(logs)})
    try:
        with ackbridge.connect(url) as conn:
            conn.declare_queue(queue)
            for i in range(5):
                assert conn.publish(queue, f"s{i}".encode(), message_id=f"s{i}").result(timeout=30).confirmed
        seen: list[int] = []
        df = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
              .option("maxRecordsPerBatch", "5").load())
        df.explain(True)
        sweep.add("explain(True)", capsys.readouterr().out)
        sweep.add("queryExecution", df._jdf.queryExecution().toString())
        record: Callable[[Any, int], None] = lambda batch, _id: seen.append(batch.count())  # noqa: E731
        query = (df.writeStream.foreachBatch(record).option("checkpointLocation", str(ck))
                 .trigger(processingTime="500 milliseconds").start())
        try:
            eventually(lambda: sum(seen) >= 5, timeout=120, message="5 rows read")
            eventually(lambda: query.lastProgress is not None, timeout=30, message="a progress report")
            sweep.add("lastProgress", json.dumps(query.lastProgress, default=str))
            sweep.add("recentProgress", json.dumps(list(query.recentProgress), default=str))
            query.explain(True)
            sweep.add("query.explain(True)", capsys.readouterr().out)
        finally:
            query.stop()
        # A failing query: wrong password (the canary plus a suffix) must not show up either.
        bad = (spark.readStream.format("ackbridge").option("url", url.replace(CANARY, CANARY + "-wrong"))
               .option("queue", queue).load())
        failing = bad.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "ck2")).start()
        with sweep.path("failing query"):
            failing.awaitTermination(45)
        failure = failing.exception()
        if failure is not None:
            sweep.add("failing query exception", f"{failure!r} {failure}")
        with contextlib.suppress(Exception):
            failing.stop()
        sweep.add("stdout/stderr", "".join(capsys.readouterr()))
    finally:
        spark.stop()
        delete_user(user)
        delete(queue)
        delete(f"{queue}.dlq")
        from tests.rabbitmq.harness import delete_exchange

        delete_exchange(f"{queue}.dlx")
    files = [p for p in [*logs.rglob("*"), *ck.rglob("*")] if p.is_file()]
    assert any(logs.rglob("*")), "Spark wrote no event log"
    for path in files:
        sweep.add(f"file {path.name}", path.read_bytes().decode("utf-8", "replace"))


@pytest.mark.rabbitmq_streams
def test_spark_stream_source_never_shows_the_canary(spark_needed: None, tmp_path: Path, sweep: Sweep,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The executor-side stream source: a RabbitMQ user whose password is the canary."""
    require_port(5552, "RabbitMQ's stream plugin (rabbitmq-plugins enable rabbitmq_stream)")
    require_port(15672, "RabbitMQ management API")
    from tests.amqp10.harness import create_user, delete_user
    from tests.spark.helpers import make_spark

    user, stream = f"canary-st-{uuid.uuid4().hex[:8]}", f"canary-st-{uuid.uuid4().hex[:8]}"
    create_user(user, CANARY)
    ck = tmp_path / "ck"
    url = f"rabbitmq-stream://{user}:{CANARY}@127.0.0.1:5552/"
    spark = make_spark("ackbridge-canary-stream")
    try:
        with ackbridge.connect(url) as conn:
            conn.declare_queue(stream)
            for i in range(5):
                assert conn.publish(stream, f"s{i}".encode(), message_id=f"s{i}").result(timeout=30).confirmed
        seen: list[int] = []
        df = (spark.readStream.format("ackbridge").option("url", url).option("subscribe", stream)
              .option("consumerReference", "canary").option("startingOffsets", "earliest").load())
        df.explain(True)
        sweep.add("explain(True)", capsys.readouterr().out)
        sweep.add("queryExecution", df._jdf.queryExecution().toString())
        record: Callable[[Any, int], None] = lambda batch, _id: seen.append(batch.count())  # noqa: E731
        query = (df.writeStream.foreachBatch(record).option("checkpointLocation", str(ck))
                 .trigger(processingTime="500 milliseconds").start())
        try:
            eventually(lambda: sum(seen) >= 5, timeout=120, message="5 rows read")
            eventually(lambda: query.lastProgress is not None, timeout=30, message="a progress report")
            sweep.add("lastProgress", json.dumps(query.lastProgress, default=str))
            query.explain(True)
            sweep.add("query.explain(True)", capsys.readouterr().out)
        finally:
            query.stop()
        bad = (spark.readStream.format("ackbridge").option("url", url.replace(CANARY, CANARY + "-wrong"))
               .option("subscribe", stream).option("consumerReference", "canary").load())
        failing = bad.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "ck2")).start()
        with sweep.path("failing query"):
            failing.awaitTermination(45)
        failure = failing.exception()
        if failure is not None:
            sweep.add("failing query exception", f"{failure!r} {failure}")
        with contextlib.suppress(Exception):
            failing.stop()
        sweep.add("stdout/stderr", "".join(capsys.readouterr()))
    finally:
        spark.stop()
        admin_url = "rabbitmq-stream://guest:guest@127.0.0.1:5552/"
        with contextlib.suppress(Exception), ackbridge.connect(admin_url) as admin:
            admin.delete_queue(stream)
        delete_user(user)
    for path in (p for p in ck.rglob("*") if p.is_file()):
        sweep.add(f"file {path.name}", path.read_bytes().decode("utf-8", "replace"))
