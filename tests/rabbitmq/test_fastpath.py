"""The guard around the sync side's use of pika internals, and its fallback to pika's public path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.channel import Channel, ContentFrameAssembler

from ackbridge.connect import connect
from ackbridge.messages import ConfirmStatus
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from ackbridge_rabbitmq import fastpath
from ackbridge_rabbitmq.deliveries import DecodingConnection
from tests.fastpath_env import CASES, check_env_switch
from tests.rabbitmq.harness import RabbitHarness, queue_counts


def test_the_installed_pika_carries_the_fast_path() -> None:
    assert pika.__version__ == fastpath.PIKA_VERSION
    assert fastpath.check().available
    assert fastpath.SUPPORT.available


def test_another_pika_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not fastpath.check("1.5.0").available
    monkeypatch.setattr(pika, "__version__", "1.3.2")
    found = fastpath.check()
    assert not found.available
    assert "pika 1.3.2" in found.reason and fastpath.PIKA_VERSION in found.reason


def test_a_missing_private_method_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(Channel, "_on_deliver")
    found = fastpath.check()
    assert not found.available
    assert "_on_deliver" in found.reason


def test_a_missing_instance_attribute_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def reset(self: Any) -> None:  # a pika whose assembler keeps its frames under other names
        self._frames = []

    monkeypatch.setattr(ContentFrameAssembler, "_reset", reset)
    found = fastpath.check()
    assert not found.available
    assert "_method_frame" in found.reason


@pytest.mark.parametrize(("value", "fast"), CASES)
def test_the_environment_variable_forces_the_public_path(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                         fast: bool) -> None:
    check_env_switch(fastpath, monkeypatch, value, fast)


@pytest.fixture
def classic() -> Iterator[RabbitHarness]:
    h = RabbitHarness("classic")
    yield h
    h.cleanup()


def _round_trip(harness: RabbitHarness) -> Any:
    """Publish (with a header, a refused and an unroutable one), consume, ack; return the transport."""
    queue = harness.new_queue()
    with connect(harness.url(), queue_type=harness.queue_type) as conn:
        transport = transport_of(conn)
        good = [conn.publish(queue, b"%d" % i, message_id=f"m-{i}", headers={"i": i}) for i in range(20)]
        bad = conn.publish(queue, b"bad", message_id="m" * 300)
        lost = conn.publish(harness.unroutable_target(), b"nowhere")
        assert all(c.result(10).confirmed for c in good)
        assert bad.result(10).status is ConfirmStatus.REFUSED
        assert lost.result(10).status is ConfirmStatus.REFUSED
        with conn.consume(queue, prefetch=20) as consumer:
            got = [consumer.get(timeout=10) for _ in range(20)]
            assert [d.message_id for d in got] == [f"m-{i}" for i in range(20)]
            assert [d.headers["i"] for d in got] == list(range(20))
            for d in got:
                d.ack()
        eventually(lambda: queue_counts().get(queue, (0, 0)) == (0, 0))
    return transport


@pytest.mark.rabbitmq
def test_a_version_mismatch_picks_the_public_path(monkeypatch: pytest.MonkeyPatch, classic: RabbitHarness) -> None:
    monkeypatch.setattr(pika, "__version__", "1.5.0")
    monkeypatch.setattr(fastpath, "SUPPORT", fastpath.check())  # as if imported under pika 1.5.0
    transport = _round_trip(classic)
    assert transport.fast_path is False


@pytest.mark.rabbitmq
def test_the_public_path_uses_plain_pika(monkeypatch: pytest.MonkeyPatch, classic: RabbitHarness) -> None:
    monkeypatch.setenv(fastpath.ENV, "0")
    with connect(classic.url()) as conn:
        transport: Any = transport_of(conn)
        assert transport.fast_path is False
        assert type(transport.conn) is pika.SelectConnection


@pytest.mark.rabbitmq
def test_the_fast_path_uses_the_decoding_connection(monkeypatch: pytest.MonkeyPatch, classic: RabbitHarness) -> None:
    monkeypatch.delenv(fastpath.ENV, raising=False)
    transport = _round_trip(classic)
    assert transport.fast_path is True
    with connect(classic.url()) as conn:
        assert isinstance(transport_of(conn).conn, DecodingConnection)  # type: ignore[attr-defined]
