"""Issue 15, item 5: what "confirmed" means on each broker is declared as data and shown by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from ackbridge.capabilities import Durability
from ackbridge.plugins import registry
from tests.core.test_cli import run

#: The level each shipped adapter declares (the AMQP 1.0 generic peer cannot tell).
EXPECTED = {
    "embedded": {Durability.ON_DISK},
    "rabbitmq": {Durability.ON_DISK, Durability.REPLICATED},  # classic, quorum
    "amqp10": {Durability.ON_DISK, Durability.NOT_TOLD},  # peer=rabbitmq, peer=generic
    "mqtt5": {Durability.UNTIL_NEXT_SAVE},
    "mqtt3.1.1": {Durability.UNTIL_NEXT_SAVE},
    "nats-jetstream": {Durability.WRITTEN},
}


def test_every_shipped_adapter_declares_what_confirmed_means() -> None:
    found: dict[str, set[Durability]] = {}
    for spec in registry().specs():
        for caps in (spec.capabilities, *spec.variants):
            found.setdefault(caps.broker, set()).add(caps.confirm_durability.level)
            assert caps.confirm_durability.how, caps.broker
    for broker, levels in EXPECTED.items():
        assert found.get(broker) == levels, (broker, found.get(broker))


def test_the_mosquitto_settings_that_make_a_confirm_durable_are_named() -> None:
    mqtt = next(caps for spec in registry().specs() for caps in (spec.capabilities, *spec.variants)
                if caps.broker == "mqtt5")
    for setting in ("persistence true", "autosave_interval", "autosave_on_changes", "max_queued_messages"):
        assert setting in mqtt.confirm_durability.how, setting


def test_the_cli_shows_it(tmp_path: Path) -> None:
    tables = json.loads(run("plugins", "--json", cwd=tmp_path).stdout)["adapters"]
    shown = {t["broker"]: t["confirm_durability"]["level"] for a in tables for t in a["tables"]}
    assert shown["embedded"] == "on disk" and shown["mqtt5"] == "in memory until the next save"
    text = run("plugins", cwd=tmp_path).stdout
    assert "confirmed means" in text
