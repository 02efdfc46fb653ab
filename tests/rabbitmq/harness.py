"""Broker-side view of RabbitMQ for the conformance suite and the plugin tests.

Counts come from ``rabbitmqctl`` (immediate; the management API's queue stats
lag ~5 s); dead-lettered bodies from the management API's ``/get`` (immediate,
it reads the queue itself). Connections are cut with ``rabbitmqctl
close_connection``, found by the ``connection_name`` the transport sends.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

from ackbridge.testing import BrokerHarness, eventually
from ackbridge.testing.faults import faults, transport_of
from ackbridge.testing.harness import until_quiet
from ackbridge.testing.proxy import FaultProxy

TEST_USER = "ackbridge_test"
# Not "guest": with user == password, "guest:***" would still show the password.
TEST_PASSWORD = "ab-Pw-7f3c91e2"
AMQP_PORT = 5672
AMQP_URL = f"amqp://{TEST_USER}:{TEST_PASSWORD}@127.0.0.1:{AMQP_PORT}/"
MGMT = "http://127.0.0.1:15672/api"
_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def mgmt(method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(MGMT + path, data=data, method=method,
                                     headers={"Authorization": _AUTH, "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def rabbitmqctl(*args: str) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def queue_counts() -> dict[str, tuple[int, int]]:
    blank: list[str] = []
    for _ in range(20):
        rows = json.loads(rabbitmqctl("list_queues", "--formatter", "json", "name", "messages_ready",
                                      "messages_unacknowledged") or "[]")
        blank = [r["name"] for r in rows
                 if not (str(r["messages_ready"]).isdigit() and str(r["messages_unacknowledged"]).isdigit())]
        if not blank:
            return {r["name"]: (int(r["messages_ready"]), int(r["messages_unacknowledged"])) for r in rows}
        # A queue declared or deleted this instant (by a test on the other worker) lists empty
        # counts; list again rather than leave a queue out, which callers would read as (0, 0).
        time.sleep(0.1)
    raise AssertionError(f"rabbitmqctl list_queues kept listing empty counts for {blank}")


def delete_queue(name: str) -> None:
    with contextlib.suppress(Exception):
        mgmt("DELETE", f"/queues/%2F/{urllib.parse.quote(name, safe='')}")


def delete_exchange(name: str) -> None:
    with contextlib.suppress(Exception):
        mgmt("DELETE", f"/exchanges/%2F/{urllib.parse.quote(name, safe='')}")


def close_connection(connection_name: str) -> None:
    # JSON output renders pids as "#PID<...>", which close_connection rejects:
    # use the plain listing, whose pid column is the accepted "<rabbit@...>" form.
    out = rabbitmqctl("list_connections", "pid", "client_properties")
    pids = [line.split("\t", 1)[0] for line in out.splitlines() if connection_name in line]
    assert pids, f"connection {connection_name} not found on the broker"
    for pid in pids:
        rabbitmqctl("close_connection", pid, "ackbridge test cut the connection")


_user_ready = False


def ensure_test_user() -> None:
    """Create (idempotently) the test user with full rights on vhost "/"."""
    global _user_ready
    if _user_ready:
        return
    mgmt("PUT", f"/users/{TEST_USER}", {"password": TEST_PASSWORD, "tags": ""})
    mgmt("PUT", f"/permissions/%2F/{TEST_USER}", {"configure": ".*", "write": ".*", "read": ".*"})
    _user_ready = True


class RabbitHarness(BrokerHarness):
    can_hold_confirms = True
    holds_confirms_on_the_wire = False  # publishes parked client-side: see hold_confirms

    def __init__(self, queue_type: str = "classic") -> None:
        self.queue_type = queue_type
        self.name = f"rabbitmq-{queue_type}"
        self._queues: list[str] = []
        self._exchanges: list[str] = []
        ensure_test_user()

    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return AMQP_URL + (f"?{query}" if query else "")

    def connect_options(self) -> dict[str, Any]:
        return {"queue_type": self.queue_type}

    def new_queue(self, *, dead_letter: bool = True) -> str:
        from ackbridge.connect import connect

        name = f"abtest-{self.queue_type}-{uuid.uuid4().hex[:10]}"
        self._queues += [name, f"{name}.dlq"]
        self._exchanges.append(f"{name}.dlx")
        with connect(self.url(), queue_type=self.queue_type, reconnect=False) as conn:
            conn.declare_queue(name, dead_letter=dead_letter)
        return name

    def unroutable_target(self) -> str:
        return f"amq.direct/nowhere-{uuid.uuid4().hex[:8]}"

    def ready(self, queue: str) -> int:
        return queue_counts().get(queue, (0, 0))[0]

    def unacked(self, queue: str) -> int:
        return queue_counts().get(queue, (0, 0))[1]

    def dead_lettered(self, queue: str) -> list[bytes]:
        got = mgmt("POST", f"/queues/%2F/{urllib.parse.quote(queue + '.dlq', safe='')}/get",
                   {"count": 1000, "ackmode": "ack_requeue_true", "encoding": "base64"})
        return [base64.b64decode(m["payload"]) for m in got]

    def break_connection(self, connection: Any) -> None:
        transport = transport_of(connection)
        before = transport.generation
        close_connection(transport.connection_name)
        eventually(lambda: transport.generation > before, timeout=30, message="client saw the cut")

    @contextlib.contextmanager
    def hold_confirms(self, connection: Any) -> Iterator[None]:
        # RabbitMQ cannot be told to withhold one client's confirms, so the
        # publishes are parked client-side: their confirms stay pending. The
        # async transport hands the call to its loop, ahead of later publishes.
        with faults(connection).publishes_held():
            yield

    def cleanup(self) -> None:
        for name in self._queues:
            delete_queue(name)
        for name in self._exchanges:
            delete_exchange(name)


class ProxiedRabbitHarness(RabbitHarness):
    """RabbitHarness whose clients connect through a :class:`~ackbridge.testing.proxy.FaultProxy`:
    held confirms are the broker's bytes the proxy does not forward yet, so the publishes
    reach the queue and only their confirms are pending (on the wire). A cut while they
    are held resets the proxy's sockets, which drops the held confirms: those publishes
    are unknown, and a retransmitting publisher sends them again (copies on the broker).
    Other cuts are ``rabbitmqctl close_connection``, as in RabbitHarness."""

    holds_confirms_on_the_wire = True

    def __init__(self, queue_type: str = "classic") -> None:
        super().__init__(queue_type)
        self.name = f"rabbitmq-{queue_type}-proxied"
        self.proxy = FaultProxy(AMQP_PORT)

    def url(self, **options: Any) -> str:
        return super().url(**options).replace(f"127.0.0.1:{AMQP_PORT}/", f"127.0.0.1:{self.proxy.port}/")

    @contextlib.contextmanager
    def hold_confirms(self, connection: Any) -> Iterator[None]:
        # Only on an open connection: the proxy holds every connection's replies, so a reconnect
        # still under way (the last cut's, after its back-off) would have its handshake held, time
        # out and try again, never opening while the hold lasts; a cut then met no live connection
        # and the client never saw it (the competing-consumers row waited 30 s for it once).
        # The transport ends the generation before it reads "reconnecting", so "open" alone can be
        # the lost connection's: its pika connection is dropped (None) first, and no longer open.
        transport: Any = transport_of(connection)

        def connected() -> bool:
            conn = transport.conn
            return conn is not None and bool(conn.is_open) and transport.state == "open"

        eventually(connected, timeout=60, message="the client is connected before a hold")
        with self.proxy.held_replies():
            yield

    def break_connection(self, connection: Any) -> None:
        if not self.proxy.replies_held:
            super().break_connection(connection)
            return
        # The publishes must be on the broker before the cut, so the cut meets them unconfirmed.
        until_quiet(lambda: self.proxy.bytes_to_target, quiet_s=0.3, limit_s=5.0)
        transport = transport_of(connection)
        before = transport.generation
        self.proxy.reset()
        eventually(lambda: transport.generation > before, timeout=30, message="client saw the cut")

    def cleanup(self) -> None:
        super().cleanup()
        self.proxy.close()
