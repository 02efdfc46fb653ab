"""AMQP 1.0 throughput: ackbridge vs raw python-qpid-proton, same broker, same run.

    .venv/bin/python benchmarks/amqp10_bench.py [--count 20000] [--prefetch 200] [--window 65536]

Two phases, each run for raw proton and for ackbridge (amqp10://):
* send-with-settlement: publish COUNT messages and wait until the broker has
  accepted every one (raw: as fast as link credit allows; ackbridge: a
  publisher with WINDOW confirms outstanding). RabbitMQ 3.10 grants a sender
  65536 credits, so raw proton has that window: WINDOW defaults to it, the same
  window (a smaller window is slower for either side: measured, raw proton held
  to 1000 outstanding ran at ~0.7x its unbounded rate). --also-window times
  ackbridge at a smaller window against the same raw runs, for comparison.
* receive-with-accept: drain COUNT messages, accepting each (raw: auto-accept
  with PREFETCH credit; ackbridge: consume(prefetch=PREFETCH, handler=...) acking
  on the consumer's handler thread (raw accepts on the container thread), and on
  its own row a get() + ack() loop on the caller's thread).
Queues are created and deleted through the management API on 127.0.0.1:15672.
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import time
import urllib.parse
import urllib.request
import uuid
from typing import Any

from paired import paired_line
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from ackbridge.connect import connect

HOST, PORT = "127.0.0.1", 5672
_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def _mgmt(method: str, name: str, body: Any = None, *, suffix: str = "") -> None:
    url = f"http://{HOST}:15672/api/queues/%2F/" + urllib.parse.quote(name, safe="") + suffix
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": _AUTH, "content-type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()


class _RawSend(MessagingHandler):  # type: ignore[misc]
    """Best-effort raw proton: as many in flight as the broker's link credit allows
    (RabbitMQ grants 65536), one Message object (proton encodes it on every send),
    timed from the first send to the last outcome, as ackbridge is (connection
    set-up excluded on both sides)."""

    def __init__(self, address: str, count: int, body: bytes) -> None:
        super().__init__()
        self.address, self.count = address, count
        self.message = Message(body=body, inferred=True, durable=True)
        self.sent = self.accepted = 0
        self.started = self.finished = 0.0

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(f"amqp://{HOST}:{PORT}", user="guest", password="guest",
                                       allowed_mechs="PLAIN", reconnect=False)
        event.container.create_sender(conn, self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            self.started = time.perf_counter()
        while event.sender.credit and self.sent < self.count:
            event.sender.send(self.message)
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.count:
            self.finished = time.perf_counter()
            event.connection.close()


class _RawReceive(MessagingHandler):  # type: ignore[misc]
    def __init__(self, address: str, count: int, prefetch: int) -> None:
        super().__init__(prefetch=prefetch, auto_accept=True)
        self.address, self.count, self.received = address, count, 0

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(f"amqp://{HOST}:{PORT}", user="guest", password="guest",
                                       allowed_mechs="PLAIN", reconnect=False)
        event.container.create_receiver(conn, self.address)

    def on_message(self, event: Any) -> None:
        self.received += 1
        if self.received == self.count:
            event.receiver.close()
            event.connection.close()


def raw_send(address: str, count: int, body: bytes) -> float:
    handler = _RawSend(address, count, body)
    Container(handler).run()
    return count / (handler.finished - handler.started)


def raw_receive(address: str, count: int, prefetch: int) -> float:
    started = time.perf_counter()
    Container(_RawReceive(address, count, prefetch)).run()
    return count / (time.perf_counter() - started)


def ab_send(address: str, count: int, body: bytes, window: int) -> float:
    with connect(f"amqp10://guest:guest@{HOST}:{PORT}") as conn:
        publisher = conn.publisher(window=window)
        started = time.perf_counter()
        confirms = [publisher.publish(address, body) for _ in range(count)]
        assert publisher.flush(timeout=300)
        elapsed = time.perf_counter() - started
        assert all(c.outcome is not None and c.outcome.confirmed for c in confirms)
    return count / elapsed


def ab_receive(address: str, count: int, prefetch: int) -> float:
    with connect(f"amqp10://guest:guest@{HOST}:{PORT}") as conn:
        started = time.perf_counter()
        consumer = conn.consume(address, prefetch=prefetch)
        for _ in range(count):
            delivery = consumer.get(timeout=30)
            assert delivery is not None, "ran dry"
            delivery.ack()
        elapsed = time.perf_counter() - started
        consumer.close()
    return count / elapsed


def ab_receive_handler(address: str, count: int, prefetch: int) -> float:
    """As ab_receive, with consume(handler=...): each delivery accepted on the container
    thread, in the shape of the raw proton receiver's on_message."""
    done = threading.Event()
    handled = [0]

    def handler(delivery: Any) -> None:
        delivery.ack()
        handled[0] += 1
        if handled[0] == count:
            done.set()

    with connect(f"amqp10://guest:guest@{HOST}:{PORT}") as conn:
        started = time.perf_counter()
        consumer = conn.consume(address, prefetch=prefetch, handler=handler)
        assert done.wait(300), f"ran dry after {handled[0]}"
        elapsed = time.perf_counter() - started
        consumer.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--prefetch", type=int, default=200)
    parser.add_argument("--window", type=int, default=65536,
                        help="ackbridge publisher window (default: raw proton's, RabbitMQ's 65536 link credit)")
    parser.add_argument("--also-window", type=int, default=1000,
                        help="also time ackbridge sends at this window against the same raw runs (0: skip)")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (raw and ackbridge back to back)")
    args = parser.parse_args()
    body = b"x" * args.size
    name = f"ab10-bench-{uuid.uuid4().hex[:8]}"
    address = f"/amq/queue/{name}"
    _mgmt("PUT", name, {"durable": True, "auto_delete": False, "arguments": {}})
    try:
        results: dict[str, list[float]] = {k: [] for k in ("raw send", "ab send", "ab send small", "raw recv",
                                                            "ab recv", "ab recv handler")}
        for _ in range(args.rounds):
            # Alternate sides so broker warm-up favours neither.
            results["raw send"].append(raw_send(address, args.count, body))
            results["raw recv"].append(raw_receive(address, args.count, args.prefetch))
            if args.also_window:
                results["ab send small"].append(ab_send(address, args.count, body, args.also_window))
                _mgmt("DELETE", name, suffix="/contents")  # every send starts on an empty queue
            results["ab send"].append(ab_send(address, args.count, body, args.window))
            results["ab recv"].append(ab_receive(address, args.count, args.prefetch))
            raw_send(address, args.count, body)  # refill (not timed) for the handler consumer
            results["ab recv handler"].append(ab_receive_handler(address, args.count, args.prefetch))
        print(f"AMQP 1.0 on RabbitMQ {HOST}:{PORT}: {args.count} msgs x {args.size} B, prefetch {args.prefetch}, "
              f"window {args.window}, {args.rounds} paired rounds "
              "(msgs/s: medians; ratio: median of per-round ratios, target >= 0.9)")
        print(paired_line("send+settlement", "raw proton", results["raw send"], results["ab send"]))
        if args.also_window:
            print(paired_line(f"  window {args.also_window}", "raw proton", results["raw send"],
                              results["ab send small"]))
        print(paired_line("receive+accept", "raw proton", results["raw recv"], results["ab recv handler"],
                          "(handler=: accepts on ackbridge's handler thread; raw on the container thread)"))
        print(paired_line("  get() loop", "raw proton", results["raw recv"], results["ab recv"]))
    finally:
        _mgmt("DELETE", name)


if __name__ == "__main__":
    main()
