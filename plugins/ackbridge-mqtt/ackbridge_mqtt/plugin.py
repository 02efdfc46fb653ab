"""Registers the ``mqtt://`` and ``mqtts://`` schemes."""

from __future__ import annotations

from collections.abc import Callable

from ackbridge.hookspecs import hookimpl
from ackbridge.plugins import AdapterSpec
from ackbridge_mqtt.capabilities import CAPABILITIES_V5, CAPABILITIES_V311
from ackbridge_mqtt.connection import MqttTransport


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(
        name="mqtt",
        schemes=("mqtt", "mqtts"),
        sync_transport=MqttTransport,
        # The default protocol is 5; the 3.1.1 table applies with protocol=3.1.1.
        capabilities=CAPABILITIES_V5,
        variants=(CAPABILITIES_V311,),
        description="MQTT 3.1.1 / 5 via paho-mqtt, mqtt[s]://user:pass@host:port (protocol=5|3.1.1)",
        messaging_system="mqtt",
        client_loggers=("paho", "paho.mqtt"),
    ))
