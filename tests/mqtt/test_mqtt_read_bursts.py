"""Confirms handed over once per paho read (ackbridge_mqtt/read_bursts.py): the guard
around paho's internals, its switch, and the rules that keep every confirm reported
exactly once and in order (no broker needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from ackbridge.messages import ConfirmOutcome
from ackbridge_mqtt import read_bursts
from ackbridge_mqtt.sending import Confirms
from tests.fastpath_env import CASES, check_env_switch

pytestmark = pytest.mark.mqtt


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, list[int]]] = []

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        self.seen.append(("confirm", [seq]))

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        self.seen.append(("confirm_batch", [seq for seq, _ in outcomes]))

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected event {name}")


def _puback() -> ReasonCode:
    return ReasonCode(PacketTypes.PUBACK, identifier=0)  # type: ignore[no-untyped-call]


def test_the_installed_paho_carries_the_fast_path() -> None:
    assert read_bursts.SUPPORT.available, read_bursts.SUPPORT.reason


def test_another_paho_release_takes_the_public_path() -> None:
    support = read_bursts.check("2.3.0")
    assert not support.available and "2.3.0" in support.reason


def test_a_network_loop_that_no_longer_reads_through_loop_read_takes_the_public_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def _loop(self: Any, timeout: float = 1.0) -> int:
        return 0

    monkeypatch.setattr(paho.Client, "_loop", _loop)
    support = read_bursts.check()
    assert not support.available and "loop_read" in support.reason


@pytest.mark.parametrize(("value", "fast"), CASES)
def test_the_environment_switch(monkeypatch: pytest.MonkeyPatch, value: str | None, fast: bool) -> None:
    check_env_switch(read_bursts, monkeypatch, value, fast)


def test_held_answers_go_over_together_and_once() -> None:
    core = Recorder()
    confirms = Confirms(core, hold=True)  # type: ignore[arg-type]
    confirms.pending.update({1: 10, 2: 11, 3: 12})
    for mid in (1, 2):
        assert confirms.answered(mid, _puback(), v5=True)
    assert core.seen == []
    confirms.report(confirms.take_held())
    confirms.report(confirms.take_held())
    assert core.seen == [("confirm_batch", [10, 11])]
    assert confirms.pending == {3: 12}


def test_without_hold_each_answer_goes_at_once() -> None:
    core = Recorder()
    confirms = Confirms(core)  # type: ignore[arg-type]
    confirms.pending[1] = 10
    assert confirms.answered(1, _puback(), v5=True)
    assert core.seen == [("confirm", [10])]
    assert confirms.held == []


def test_the_read_client_hands_over_after_each_read_even_when_it_fails() -> None:
    client = read_bursts.ReadBurstClient(paho.CallbackAPIVersion.VERSION2, client_id="t")
    calls: list[str] = []
    client.after_read = lambda: calls.append("after")
    client.loop_read()  # not connected: paho answers NO_CONN
    assert calls == ["after"]
