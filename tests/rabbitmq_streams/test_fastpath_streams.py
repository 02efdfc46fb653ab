"""The guard around the hand-written AMQP 1.0 sections and rstream's Producer's frame
sending (ackbridge_rabbitmq_streams.fastpath), and the fallback to rstream's public path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import rstream
import rstream.amqp
from rstream import AMQPMessage
from rstream.client import BaseClient, Client

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.transport.faults import transport_of
from ackbridge.transport.offset_log import OffsetRange
from ackbridge_rabbitmq_streams import codec, fastpath, sections
from tests.fastpath_env import CASES, check_env_switch
from tests.rabbitmq_streams.streams import URL, StreamAdmin


def test_the_installed_rstream_carries_the_fast_path() -> None:
    assert rstream.__version__ == fastpath.RSTREAM_VERSION
    assert fastpath.check().available
    assert fastpath.SUPPORT.available


def test_another_rstream_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not fastpath.check("1.1.2").available
    monkeypatch.setattr(rstream, "__version__", "1.2.0")
    found = fastpath.check()
    assert not found.available
    assert "rstream 1.2.0" in found.reason and fastpath.RSTREAM_VERSION in found.reason


def test_a_missing_send_publish_frame_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(BaseClient, "send_publish_frame")  # where rstream 1.1.1 defines it
    found = fastpath.check()
    assert not found.available
    assert "send_publish_frame" in found.reason


def test_an_rstream_that_encodes_otherwise_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An rstream that still says 1.1.1 but writes other bytes (here: a footer after every
    message) is not trusted with the hand-written sections."""
    original = rstream.amqp.encode_payload

    def with_footer(output: bytearray, payload: Any) -> bytes:
        return bytes(original(output=output, payload=payload)) + b"\x00\x53\x78\xc1\x01\x00"

    monkeypatch.setattr(rstream.amqp, "encode_payload", with_footer)
    found = fastpath.check()
    assert not found.available
    assert "encodes sample message 0" in found.reason


def test_an_rstream_that_decodes_otherwise_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    original = codec.amqp_decoder

    def without_properties(data: bytes) -> Any:  # an rstream that loses the properties section
        message = original(data)
        return AMQPMessage(body=message.body, application_properties=message.application_properties)

    monkeypatch.setattr(codec, "amqp_decoder", without_properties)
    found = fastpath.check()
    assert not found.available
    assert "decodes sample message 2" in found.reason


@pytest.mark.parametrize(("value", "fast"), CASES)
def test_the_environment_variable_forces_the_public_path(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                         fast: bool) -> None:
    check_env_switch(fastpath, monkeypatch, value, fast)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often the fast path's pieces and the public path's ran (called through)."""
    counts = {"hand-written sections": 0, "hand-written reader": 0, "send_publish_frame": 0, "publish": 0}

    def counted(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[label] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    counted(sections, "properties_section", "hand-written sections")
    counted(sections, "properties_and_body", "hand-written reader")
    counted(Client, "send_publish_frame", "send_publish_frame")
    counted(Client, "publish", "publish")
    yield counts


def _round_trip(stream: str) -> Any:
    """Publish 20 (one with headers), consume and ack them all; return the transport."""
    with ackbridge.connect(URL) as conn:
        transport = transport_of(conn)
        confirms = [conn.publish(stream, b"%d" % i, message_id=f"m-{i}") for i in range(19)]
        confirms.append(conn.publish(stream, b"h", headers={"k": "v"}))
        assert [c.result(10).status for c in confirms] == [ConfirmStatus.CONFIRMED] * 20
        with conn.consume(stream, prefetch=20) as consumer:
            got = [consumer.get(timeout=10) for _ in range(20)]
            assert [d.message_id for d in got] == [f"m-{i}" for i in range(19)] + [None]
            assert [d.body for d in got] == [b"%d" % i for i in range(19)] + [b"h"]
            assert got[-1].headers == {"k": "v"}
            for d in got:
                d.ack()
    return transport


@pytest.mark.rabbitmq_streams
def test_a_version_mismatch_picks_the_public_path(monkeypatch: pytest.MonkeyPatch, admin: StreamAdmin,
                                                 calls: dict[str, int]) -> None:
    monkeypatch.setattr(rstream, "__version__", "1.2.0")
    monkeypatch.setattr(fastpath, "SUPPORT", fastpath.check())  # as if imported under rstream 1.2.0
    monkeypatch.delenv(fastpath.ENV, raising=False)
    transport = _round_trip(admin.new_stream())
    assert transport.fast_path is False
    assert calls["hand-written sections"] == calls["hand-written reader"] == calls["send_publish_frame"] == 0
    assert calls["publish"] >= 1


@pytest.mark.rabbitmq_streams
def test_the_fast_path_writes_and_reads_by_hand(monkeypatch: pytest.MonkeyPatch, admin: StreamAdmin,
                                                calls: dict[str, int]) -> None:
    monkeypatch.delenv(fastpath.ENV, raising=False)
    transport = _round_trip(admin.new_stream())
    assert transport.fast_path is True
    assert calls["hand-written sections"] == 20 and calls["hand-written reader"] >= 19
    assert calls["send_publish_frame"] >= 1 and calls["publish"] == 0


@pytest.mark.rabbitmq_streams
def test_the_offset_log_reads_by_hand_or_through_rstream(monkeypatch: pytest.MonkeyPatch,
                                                         admin: StreamAdmin) -> None:
    stream = admin.new_stream()
    admin.publish_batches(stream, [3], message_id="x")
    for value, fast in (("1", True), ("0", False)):
        monkeypatch.setenv(fastpath.ENV, value)
        with ackbridge.open_offset_log(URL) as log:
            assert log.fast_path is fast  # type: ignore[attr-defined]
            start, end = log.bounds(stream)
            bodies = [(r.message.body, r.message.message_id) for r in log.read(OffsetRange(stream, start, end))]
        assert bodies == [(b"m0", "x"), (b"m1", "x"), (b"m2", "x")]
