"""ackbridge over MQTT 3.1.1 and 5 (paho-mqtt 2.2, tested on Mosquitto 2.0).

A "queue" is a topic plus a persistent session (fixed client id) subscribed to
it at QoS 1: the broker keeps what the session has not PUBACKed across
reconnects and process restarts. Requeue and reject are emulated by
republishing; see :mod:`ackbridge_mqtt.capabilities`. A source may also be a
topic filter (``+``/``#``): its persistent session subscribes to the filter.
"""
