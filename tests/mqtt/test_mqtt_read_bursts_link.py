"""A link's end reports the confirms it held before those it lost, each once (read_bursts.py),
and the conformance suite passes on paho's public path (``ACKBRIDGE_PAHO_FAST_PATH=0``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from ackbridge.messages import ConfirmOutcome, ConfirmStatus
from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.faults import transport_of
from ackbridge.testing.twins import Twin
from ackbridge_mqtt import read_bursts
from tests.fastpath_env import public_path_twin
from tests.mqtt.harness import MqttHarness

pytestmark = pytest.mark.mqtt


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[int, ConfirmStatus]] = []

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        self.seen.append((seq, outcome.status))

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        self.seen.extend((seq, outcome.status) for seq, outcome in outcomes)

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def test_an_end_reports_what_was_answered_before_what_was_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    from ackbridge.options import ConnectionSettings
    from ackbridge.urls import parse_url
    from ackbridge_mqtt.link import Link
    from ackbridge_mqtt.options import MqttSettings
    from ackbridge_mqtt.requeued import RequeuedMemory

    monkeypatch.delenv(read_bursts.ENV, raising=False)
    url = parse_url("mqtt://127.0.0.1:1883")
    core = Recorder()
    settings = MqttSettings.resolve(url, {}, ConnectionSettings.from_options({}))
    link = Link(url, settings, core, RequeuedMemory(), "publisher",  # type: ignore[arg-type]
                "ab-test-end", clean=True, session_expiry=0, receive_maximum=None)
    assert isinstance(link.client, read_bursts.ReadBurstClient)
    link.live = True
    link.confirms.pending.update({1: 10, 2: 11})
    link._on_publish(link.client, None, 1, ReasonCode(PacketTypes.PUBACK, identifier=0), None)  # type: ignore[no-untyped-call]
    assert core.seen == []  # held until the read ends
    link.lost("cut")
    assert core.seen == [(10, ConfirmStatus.CONFIRMED), (11, ConfirmStatus.UNKNOWN)]
    link.lost("again")
    link._hand_over()
    assert len(core.seen) == 2


class TestMqtt5PublicPath(ConformanceSuite):
    @pytest.fixture(params=["sync", "async"])
    def twin(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Twin]:
        yield from public_path_twin(request, monkeypatch, read_bursts.ENV)

    @pytest.fixture
    def harness(self) -> Iterator[MqttHarness]:
        harness = MqttHarness("5")
        yield harness
        harness.cleanup()

    def test_the_public_path_is_in_use(self, conn: object) -> None:
        transport = transport_of(conn)
        links = transport.links()  # type: ignore[attr-defined]
        assert links and not any(link.read_bursts for link in links)
