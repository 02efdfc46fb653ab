"""Flow-control limits of Mosquitto 2.0 and a checker for consumer settings.

Measured on Mosquitto 2.0.11 with its defaults (max_inflight_messages 20,
max_queued_messages 1000), see tests/mqtt/test_mqtt_limits.py:

* MQTT 5: the broker honours the client's Receive Maximum (ackbridge sends
  ``prefetch``): with RM=20 / 100 it sent 20 / 100 unacked messages.
* MQTT 3.1.1: no Receive Maximum; the broker keeps ``max_inflight_messages``
  (20) unacked in flight, whatever prefetch says.
* Beyond in-flight, each session queues ``max_queued_messages`` (1000); a
  1500-message backlog to an offline session kept 1000 and silently dropped
  500. A publisher still gets a normal PUBACK for a dropped message.
"""

from __future__ import annotations

from ackbridge_mqtt.capabilities import MAX_RECEIVE_MAXIMUM

__all__ = ["MAX_RECEIVE_MAXIMUM", "MOSQUITTO_MAX_INFLIGHT", "MOSQUITTO_MAX_QUEUED", "check_settings",
           "effective_window"]

MOSQUITTO_MAX_INFLIGHT = 20
MOSQUITTO_MAX_QUEUED = 1000


def effective_window(prefetch: int, protocol: str = "5", broker_max_inflight: int = MOSQUITTO_MAX_INFLIGHT) -> int:
    """Unacked messages the broker will have in flight to one consumer session."""
    if protocol.startswith("5"):
        return max(1, min(prefetch, MAX_RECEIVE_MAXIMUM))
    return broker_max_inflight


def check_settings(
    prefetch: int,
    batch_size: int,
    *,
    protocol: str = "5",
    expected_backlog: int | None = None,
    broker_max_inflight: int = MOSQUITTO_MAX_INFLIGHT,
    broker_max_queued: int = MOSQUITTO_MAX_QUEUED,
    acks_held_until_commit: bool = True,
) -> list[str]:
    """Warnings (empty when safe) for consuming with these settings.

    *batch_size* is how many deliveries one batch takes before it commits;
    when *acks_held_until_commit* (the Spark connector's way), no PUBACK leaves
    before the batch commits, so the batch can hold at most the in-flight window.
    *expected_backlog* is the most messages that may pile up in the session
    (e.g. while the consumer is stopped); Mosquitto drops beyond its queue.
    """
    warnings: list[str] = []
    window = effective_window(prefetch, protocol, broker_max_inflight)
    if not protocol.startswith("5") and prefetch != broker_max_inflight:
        warnings.append(
            f"MQTT 3.1.1 has no Receive Maximum: prefetch={prefetch} is ignored and the broker keeps "
            f"{broker_max_inflight} (its max_inflight_messages) in flight; use protocol=5 to choose the window")
    if protocol.startswith("5") and prefetch > MAX_RECEIVE_MAXIMUM:
        # The v5 capability table declares it as max_prefetch, so consume() refuses it.
        warnings.append(f"prefetch={prefetch} exceeds MQTT 5 Receive Maximum {MAX_RECEIVE_MAXIMUM}: consume() "
                        f"refuses it; use prefetch <= {MAX_RECEIVE_MAXIMUM}")
    if acks_held_until_commit and batch_size > window:
        warnings.append(
            f"batch_size={batch_size} exceeds the in-flight window ({window}): with PUBACKs held until the batch "
            f"commits the broker stops sending after {window} and the batch can never fill; use "
            f"batch_size <= {window} or a trigger by time")
    if expected_backlog is not None:
        capacity = broker_max_queued + window
        if expected_backlog > broker_max_queued:
            warnings.append(
                f"expected_backlog={expected_backlog} exceeds Mosquitto's max_queued_messages={broker_max_queued} "
                f"per session (about {capacity} with the consumer online): the broker DROPS the excess silently "
                "and still PUBACKs the publisher; raise max_queued_messages in mosquitto.conf or consume faster")
    return warnings
