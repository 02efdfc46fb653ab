"""QoS 1 throughput on Mosquitto: ackbridge vs raw paho doing the same work, in one run.

* publish: N publishes with confirms (PUBACK), MQTT 5, 100 in flight, wait for all.
* consume: a backlog of M messages (M <= Mosquitto's 1000 queue limit, see
  docs/brokers/mqtt.md), manual PUBACK of every message, Receive Maximum 100.

Usage: .venv/bin/python benchmarks/mqtt_bench.py [--n 20000] [--m 1000] [--rounds 3]
Prints msgs/s for each and the ratio ackbridge / raw (target >= 0.9).
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

import ackbridge
from ackbridge_mqtt.sessions import derived_session_id

HOST, PORT = "127.0.0.1", 1883
INFLIGHT = 100


def _raw(client_id: str, *, clean: bool, receive_maximum: int = INFLIGHT) -> paho.Client:
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv5,
                    manual_ack=True)
    c.max_inflight_messages_set(INFLIGHT)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0 if clean else 300
    props.ReceiveMaximum = receive_maximum
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    c.connect(HOST, PORT, clean_start=clean, properties=props)
    c.loop_start()
    assert connected.wait(10)
    return c


def _stop(c: paho.Client) -> None:
    c.disconnect()
    c.loop_stop()


def raw_publish(n: int, topic: str) -> float:
    c = _raw(f"bench-rawpub-{uuid.uuid4().hex[:8]}", clean=True)
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


def ab_publish(n: int, topic: str) -> float:
    with ackbridge.connect(f"mqtt://{HOST}:{PORT}", publish_inflight=INFLIGHT) as conn:
        publisher = conn.publisher(window=10_000)
        start = time.perf_counter()
        for _ in range(n):
            publisher.publish(topic, b"x" * 100)
        assert publisher.flush(timeout=120)
        return n / (time.perf_counter() - start)


def _fill(topic: str, m: int) -> str:
    """Create the queue session for *topic* and put *m* messages in it."""
    session = derived_session_id(topic)
    c = _raw(session, clean=False)
    subscribed = threading.Event()
    c.on_subscribe = lambda *a: subscribed.set()
    c.subscribe([(topic, SubscribeOptions(qos=1))])
    assert subscribed.wait(10)
    _stop(c)
    raw_publish(m, topic)
    return session


def raw_consume(m: int, topic: str) -> float:
    session = _fill(topic, m)
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
    c.connect(HOST, PORT, clean_start=False, properties=props)
    c.loop_start()
    for _ in range(m):
        assert got.acquire(timeout=60)
    elapsed = time.perf_counter() - first[0]
    _stop(c)
    return m / elapsed


def ab_consume(m: int, topic: str) -> float:
    _fill(topic, m)
    with ackbridge.connect(f"mqtt://{HOST}:{PORT}", session_expiry=1) as conn:
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000, help="publishes per round")
    parser.add_argument("--m", type=int, default=1_000, help="backlog consumed per round (<= 1000)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    results: dict[str, list[float]] = {k: [] for k in ("raw_pub", "ab_pub", "raw_con", "ab_con")}
    for r in range(args.rounds):
        # Alternate the order so neither side always runs on a warmer broker.
        order = [("raw_pub", raw_publish), ("ab_pub", ab_publish)]
        for key, fn in order if r % 2 == 0 else order[::-1]:
            results[key].append(fn(args.n, f"bench/{run}/nosub"))
        corder = [("raw_con", raw_consume), ("ab_con", ab_consume)]
        for key, fn in corder if r % 2 == 0 else corder[::-1]:
            results[key].append(fn(args.m, f"bench/{run}/q{r}{key}"))
    best = {k: max(v) for k, v in results.items()}
    print(f"MQTT 5 QoS 1 on Mosquitto {HOST}:{PORT}, {args.rounds} rounds, best of each (msgs/s)")
    print(f"publish+confirm  raw paho {best['raw_pub']:>9.0f}   ackbridge {best['ab_pub']:>9.0f}   "
          f"ratio {best['ab_pub'] / best['raw_pub']:.2f}")
    print(f"consume+ack      raw paho {best['raw_con']:>9.0f}   ackbridge {best['ab_con']:>9.0f}   "
          f"ratio {best['ab_con'] / best['raw_con']:.2f}")
    print("all rounds:", {k: [round(x) for x in v] for k, v in results.items()})


if __name__ == "__main__":
    main()
