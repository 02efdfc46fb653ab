"""QoS 1 throughput on Mosquitto: ackbridge vs raw paho doing the same work, in one run.

* publish: N publishes with confirms (PUBACK), MQTT 5, 100 in flight, wait for all.
* consume: a backlog of M messages, manual PUBACK of every message, Receive
  Maximum 100. ackbridge is timed twice: with a handler (acks on paho's network
  thread, the shape of the raw paho code) and with a get() loop on the caller's
  thread (one thread hand-off per message). The shared Mosquitto queues at most 1000 messages per session
  (then drops: docs/brokers/mqtt.md), and 1000 messages drain in ~0.1 s, too
  short to time. So by default the consume phase runs against a private
  Mosquitto 2.0 this script starts on a free loopback port with
  ``max_queued_messages 0`` (unlimited), and M defaults to 20,000.
  ``--shared`` times it on 127.0.0.1:1883 instead (M <= 1000).

Usage: .venv/bin/python benchmarks/mqtt_bench.py [--n 20000] [--m 20000] [--rounds 5] [--shared]
Prints msgs/s for each and the ratio ackbridge / raw (target >= 0.9): the median of the
per-round ratios, each round timing raw and ackbridge back to back (benchmarks/paired.py).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions
from paired import paired_line

import ackbridge
from ackbridge_mqtt.sessions import derived_session_id

HOST, PORT = "127.0.0.1", 1883
INFLIGHT = 100


@contextlib.contextmanager
def private_mosquitto() -> Iterator[int]:
    """A Mosquitto on a free loopback port that queues without limit; yields its port."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        conf = f"{tmp}/mosquitto.conf"
        with open(conf, "w") as fh:
            fh.write(f"listener {port} {HOST}\nallow_anonymous true\npersistence false\n"
                     "max_queued_messages 0\nmax_inflight_messages 0\n")
        proc = subprocess.Popen([binary, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"private mosquitto did not listen on {port}")
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


def _raw(client_id: str, *, clean: bool, port: int, receive_maximum: int = INFLIGHT) -> paho.Client:
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv5,
                    manual_ack=True)
    c.max_inflight_messages_set(INFLIGHT)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0 if clean else 300
    props.ReceiveMaximum = receive_maximum
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    c.connect(HOST, port, clean_start=clean, properties=props)
    c.loop_start()
    assert connected.wait(10)
    return c


def _stop(c: paho.Client) -> None:
    c.disconnect()
    c.loop_stop()


def raw_publish(n: int, topic: str, port: int = PORT) -> float:
    c = _raw(f"bench-rawpub-{uuid.uuid4().hex[:8]}", clean=True, port=port)
    done = threading.Semaphore(0)
    c.on_publish = lambda *a: done.release()
    start = time.perf_counter()
    for _ in range(n):
        c.publish(topic, b"x" * 100, qos=1)
    for _ in range(n):
        assert done.acquire(timeout=60)
    elapsed = time.perf_counter() - start
    _stop(c)
    return n / elapsed


def ab_publish(n: int, topic: str, port: int = PORT) -> float:
    with ackbridge.connect(f"mqtt://{HOST}:{port}", publish_inflight=INFLIGHT) as conn:
        publisher = conn.publisher(window=10_000)
        start = time.perf_counter()
        for _ in range(n):
            publisher.publish(topic, b"x" * 100)
        assert publisher.flush(timeout=120)
        return n / (time.perf_counter() - start)


def _fill(topic: str, m: int, port: int) -> str:
    """Create the queue session for *topic* and put *m* messages in it."""
    session = derived_session_id(topic)
    c = _raw(session, clean=False, port=port)
    subscribed = threading.Event()
    c.on_subscribe = lambda *a: subscribed.set()
    c.subscribe([(topic, SubscribeOptions(qos=1))])
    assert subscribed.wait(10)
    _stop(c)
    raw_publish(m, topic, port)
    return session


def raw_consume(m: int, topic: str, port: int = PORT) -> float:
    session = _fill(topic, m, port)
    got = threading.Semaphore(0)
    first: list[float] = []

    def on_message(client: paho.Client, userdata: object, msg: paho.MQTTMessage) -> None:
        if not first:
            first.append(time.perf_counter())
        client.ack(msg.mid, msg.qos)
        got.release()

    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=session, protocol=MQTTProtocolVersion.MQTTv5,
                    manual_ack=True)
    c.on_message = on_message
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0  # delete the session afterwards
    props.ReceiveMaximum = INFLIGHT
    c.connect(HOST, port, clean_start=False, properties=props)
    c.loop_start()
    for _ in range(m):
        assert got.acquire(timeout=60)
    elapsed = time.perf_counter() - first[0]
    _stop(c)
    return m / elapsed


def ab_consume(m: int, topic: str, port: int = PORT) -> float:
    _fill(topic, m, port)
    with ackbridge.connect(f"mqtt://{HOST}:{port}", session_expiry=1) as conn:
        consumer = conn.consume(topic, prefetch=INFLIGHT)
        delivery = consumer.get(timeout=30)
        assert delivery is not None
        start = time.perf_counter()
        delivery.ack()
        for _ in range(m - 1):
            delivery = consumer.get(timeout=30)
            assert delivery is not None
            delivery.ack()
        return m / (time.perf_counter() - start)


def ab_consume_handler(m: int, topic: str, port: int = PORT) -> float:
    """The same work as raw_consume, shaped the same way: a handler called on the
    client's network thread acks each message (consume(..., handler=...))."""
    _fill(topic, m, port)
    got = threading.Semaphore(0)
    first: list[float] = []

    def handler(delivery: ackbridge.Delivery) -> None:
        if not first:
            first.append(time.perf_counter())
        delivery.ack()
        got.release()

    with ackbridge.connect(f"mqtt://{HOST}:{port}", session_expiry=1) as conn:
        consumer = conn.consume(topic, prefetch=INFLIGHT, handler=handler)
        for _ in range(m):
            assert got.acquire(timeout=60)
        elapsed = time.perf_counter() - first[0]
        consumer.close()
    return m / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000, help="publishes per round")
    parser.add_argument("--m", type=int, default=None,
                        help="backlog consumed per round (default 20000; <= 1000 with --shared)")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (raw and ackbridge back to back)")
    parser.add_argument("--shared", action="store_true",
                        help="time the consume phase on the shared 127.0.0.1:1883 (1000-message queue limit)")
    args = parser.parse_args()
    m = args.m or (1_000 if args.shared else 20_000)
    if args.shared and m > 1000:
        parser.error("--shared: Mosquitto's default queue holds 1000 messages per session; use --m <= 1000")
    with contextlib.ExitStack() as stack:
        consume_port = PORT if args.shared else stack.enter_context(private_mosquitto())
        _run(args.n, m, args.rounds, consume_port)


def _run(n: int, m: int, rounds: int, consume_port: int) -> None:
    run = uuid.uuid4().hex[:8]
    results: dict[str, list[float]] = {k: [] for k in ("raw_pub", "ab_pub", "raw_con", "ab_con", "ab_hnd")}
    for r in range(rounds):
        # Alternate the order so neither side always runs on a warmer broker.
        order = [("raw_pub", raw_publish), ("ab_pub", ab_publish)]
        for key, fn in order if r % 2 == 0 else order[::-1]:
            results[key].append(fn(n, f"bench/{run}/nosub", PORT))
        corder = [("raw_con", raw_consume), ("ab_con", ab_consume), ("ab_hnd", ab_consume_handler)]
        for key, fn in corder if r % 2 == 0 else corder[::-1]:
            results[key].append(fn(m, f"bench/{run}/q{r}{key}", consume_port))
    where = ("the shared Mosquitto" if consume_port == PORT
             else f"a private Mosquitto on {HOST}:{consume_port} (unlimited queue)")
    print(f"MQTT 5 QoS 1, Mosquitto 2.0, {rounds} paired rounds (msgs/s: medians; ratio: median of per-round ratios)")
    print(f"publish: {n} msgs on {HOST}:{PORT}; consume: a backlog of {m} msgs on {where}")
    print(paired_line("publish+confirm", "raw paho", results["raw_pub"], results["ab_pub"]))
    print(paired_line("consume+ack", "raw paho", results["raw_con"], results["ab_hnd"],
                      "(handler=: acks on ackbridge's handler thread; raw acks on paho's)"))
    print(paired_line("consume+ack", "raw paho", results["raw_con"], results["ab_con"],
                      "(get() loop on the caller's thread)"))
    print("all rounds:", {k: [round(x) for x in v] for k, v in results.items()})


if __name__ == "__main__":
    main()
