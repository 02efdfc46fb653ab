"""Mosquitto's side of a pipeline run: what each persistent session holds, read with a
raw paho-mqtt client under the session's own client id.

Mosquitto tells no queue depth. A session shows what it holds only to a client that
resumes it (same client id, clean start off): :func:`held` does so, publishes a marker
to the session's topic and collects what arrives before the marker (a session
delivers in order: what it held, then the marker), within a bounded time. By default
paho PUBACKs each message, so the session ends empty: a final assertion. With
``keep=True`` only the marker is PUBACKed: the rest stays in flight in the session and
comes back (dup) to its next client. Either way a look takes the session over from a
client using it, so it is never made while a pipeline runs.
"""

from __future__ import annotations

import queue as queue_module
import time
from dataclasses import dataclass

from ackbridge.pipeline import RedeliveryPolicy

#: protocol -> URL; each pipeline test on MQTT runs on these (Mosquitto on loopback).
URLS = {"5": "mqtt://127.0.0.1:1883?protocol=5", "3.1.1": "mqtt://127.0.0.1:1883?protocol=3.1.1"}
MARKER = b"ackbridge-test-marker"


@dataclass(frozen=True)
class Held:
    """One message a session held: body, MQTT 5 user properties ({} on 3.1.1), dup flag."""

    body: bytes
    properties: dict[str, str]
    dup: bool


def held(topic: str, protocol: str = "5", *, keep: bool = False, timeout: float = 30.0) -> list[Held]:
    """What the persistent session of *topic* (the plugin's derived client id) holds."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from ackbridge_mqtt.sessions import session_id

    v5 = protocol == "5"
    arrived: queue_module.Queue[tuple[int, Held]] = queue_module.Queue()
    connected: queue_module.Queue[bool] = queue_module.Queue()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=session_id(topic),
                         protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311, clean_session=None if v5 else False,
                         manual_ack=keep)
    client.on_connect = lambda c, u, flags, rc, p: connected.put(bool(flags.session_present))
    client.on_message = lambda c, u, msg: arrived.put((msg.mid, Held(
        bytes(msg.payload), dict(getattr(msg.properties, "UserProperty", None) or []), bool(msg.dup))))
    if v5:
        keep_session = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho leaves it untyped
        keep_session.SessionExpiryInterval = 3600  # the plugin's default: the session outlives this look
        client.connect("127.0.0.1", 1883, clean_start=False, properties=keep_session)
    else:
        client.connect("127.0.0.1", 1883)
    client.loop_start()
    deadline = time.monotonic() + timeout
    try:
        assert connected.get(timeout=timeout), f"no session of {topic!r} on Mosquitto"
        client.publish(topic, MARKER, qos=1).wait_for_publish(timeout)
        found: list[Held] = []
        while True:
            mid, item = arrived.get(timeout=max(deadline - time.monotonic(), 0.1))
            if item.body == MARKER:
                if keep:
                    client.ack(mid, 1)
                return found
            found.append(item)
    finally:
        client.disconnect()
        client.loop_stop()


def pipeline_topics(queue: str, policy: RedeliveryPolicy) -> list[str]:
    """Every topic whose session a pipeline on *queue* uses: the queue, its delay topics,
    and the dead-letter topic (``TOPIC/dlq``) of each."""
    from ackbridge_mqtt.sessions import dead_letter_topic

    topics = [queue, *policy.delay_queues(queue)]
    return [*topics, *(dead_letter_topic(None, topic) for topic in topics)]


def held_by_every_session(queue: str, policy: RedeliveryPolicy, protocol: str = "5") -> dict[str, list[Held]]:
    """What each of the pipeline's sessions holds, those holding something only (drained)."""
    found = {topic: held(topic, protocol) for topic in pipeline_topics(queue, policy)}
    return {topic: messages for topic, messages in found.items() if messages}

