"""Broker-side view of RabbitMQ 3.10 for the AMQP 1.0 adapter.

Queues are created through the management HTTP API (with a dead-letter
target when asked), counted with ``rabbitmqctl`` (immediate, unlike the
management statistics), and the client connects through a :class:`FaultProxy`
so a test can cut the connection or hold the broker's confirms.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

from ackbridge.testing.faults import transport_of
from ackbridge.testing.harness import ProxiedHarness
from ackbridge.testing.proxy import FaultProxy

HOST = "127.0.0.1"
AMQP_PORT = 5672
MGMT = f"http://{HOST}:15672/api"
_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def mgmt(method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(MGMT + path, data=data, method=method,
                                     headers={"Authorization": _AUTH, "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def queue_path(name: str) -> str:
    return "/queues/%2F/" + urllib.parse.quote(name, safe="")


def queue_name(address: str) -> str:
    for prefix in ("/amq/queue/", "/queue/"):
        if address.startswith(prefix):
            return address[len(prefix):]
    return address


def queue_counts() -> dict[str, tuple[int, int]]:
    out = subprocess.run(
        ["rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "messages_ready",
         "messages_unacknowledged"], capture_output=True, text=True, timeout=60, check=True).stdout
    counts: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            counts[parts[0]] = (int(parts[1]), int(parts[2]))
    return counts


def declare(name: str, *, dead_letter_to: str | None = None) -> None:
    arguments: dict[str, Any] = {}
    if dead_letter_to is not None:
        arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letter_to}
    mgmt("PUT", queue_path(name), {"durable": True, "auto_delete": False, "arguments": arguments})


def delete(name: str) -> None:
    with contextlib.suppress(urllib.error.HTTPError, OSError):
        mgmt("DELETE", queue_path(name))


def delete_if_unused(name: str) -> None:
    """Delete *name* unless it has a consumer when the broker gets the request (400 then)."""
    with contextlib.suppress(urllib.error.HTTPError, OSError):
        mgmt("DELETE", queue_path(name) + "?if-unused=true")


class Amqp10Harness(ProxiedHarness):
    name = "rabbitmq-amqp10"
    can_count_unacked = True
    can_hold_confirms = True

    def __init__(self, user: str = "guest", password: str = "guest") -> None:
        self.user = user
        self.password = password
        self.proxy = FaultProxy(AMQP_PORT)
        self.queues: list[str] = []

    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"amqp10://{self.user}:{self.password}@{HOST}:{self.proxy.port}" + (f"?{query}" if query else "")

    def connect_options(self) -> dict[str, Any]:
        return {"reconnect_max_delay": 0.5}

    def new_queue(self, *, dead_letter: bool = True) -> str:
        name = f"ab10-{uuid.uuid4().hex[:12]}"
        dlq = f"{name}.dlq" if dead_letter else None
        if dlq is not None:
            declare(dlq)
            self.queues.append(dlq)
        declare(name, dead_letter_to=dlq)
        self.queues.append(name)
        # /amq/queue/ uses the existing queue as declared (with its arguments);
        # /queue/ would try to re-declare it without them and fail.
        return f"/amq/queue/{name}"

    def unroutable_target(self) -> str | None:
        return None  # RabbitMQ 3.10 accepts unroutable publishes over AMQP 1.0

    def ready(self, queue: str) -> int:
        return queue_counts().get(queue_name(queue), (0, 0))[0]

    def unacked(self, queue: str) -> int:
        return queue_counts().get(queue_name(queue), (0, 0))[1]

    def dead_lettered(self, queue: str) -> list[bytes]:
        name = queue_name(queue) + ".dlq"
        got = mgmt("POST", queue_path(name) + "/get",
                   {"count": 1000, "ackmode": "ack_requeue_true", "encoding": "base64"})
        return [decode_body(base64.b64decode(m["payload"])) for m in got]

    def cut_seen(self, connection: Any) -> Callable[[], bool]:
        # The AMQP 1.0 transport's live flag drops at the cut, before it reconnects.
        transport: Any = transport_of(connection)
        before = transport.live
        return lambda: bool(transport.live != before)

    def cleanup(self) -> None:
        self.proxy.close()
        for name in self.queues:
            delete(name)
        self.queues.clear()


def create_user(user: str, password: str) -> None:
    """A throw-away user whose password is a canary (guest:guest hides leaks: the
    user name equals the password)."""
    mgmt("PUT", f"/users/{urllib.parse.quote(user)}", {"password": password, "tags": ""})
    mgmt("PUT", f"/permissions/%2F/{urllib.parse.quote(user)}", {"configure": ".*", "write": ".*", "read": ".*"})


def delete_user(user: str) -> None:
    with contextlib.suppress(urllib.error.HTTPError, OSError):
        mgmt("DELETE", f"/users/{urllib.parse.quote(user)}")


def decode_body(payload: bytes) -> bytes:
    """RabbitMQ 3.10 stores an AMQP 1.0 message as its encoded sections; pull out
    the data section (0x00 0x53 0x75 + binary) so tests compare plain bodies."""
    marker = b"\x00\x53\x75"
    at = payload.find(marker)
    if at < 0:
        return payload
    kind = payload[at + 3]
    if kind == 0xA0:
        size = payload[at + 4]
        return payload[at + 5: at + 5 + size]
    if kind == 0xB0:
        size = int.from_bytes(payload[at + 4: at + 8], "big")
        return payload[at + 8: at + 8 + size]
    return payload


def wait_ready(name: str, expected: int, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if queue_counts().get(name, (0, 0))[0] == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never held {expected} ready messages")
