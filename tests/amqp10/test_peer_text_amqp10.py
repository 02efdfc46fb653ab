"""Text from the peer that is not valid UTF-8 (issue 14: no process-wide patch of proton).

proton's binding decodes strings strictly; ackbridge reads what the peer sends
through its own code (``ackbridge_amqp10.peer_text``): UTF-8 where valid,
Latin-1 (lossless) where not, a string body as its bytes. ``cproton`` itself
is never changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import cproton  # type: ignore[import-untyped]  # proton's C binding ships no types
import pytest
from proton import Condition, Data, Delivery, Message

from ackbridge.connect import connect
from ackbridge.errors import BrokerError, StaleDeliveryError
from ackbridge.testing.faults import faults, transport_of
from ackbridge.testing.harness import eventually
from ackbridge_amqp10 import codec, peer_text
from tests.amqp10.harness import Amqp10Harness, queue_counts, queue_name
from tests.amqp10.peer import ToyPeer

pytestmark = pytest.mark.amqp10

ORIGINAL_UTF82STRING = cproton.utf82string

_NULL = b"\x40"


def _str8(raw: bytes) -> bytes:
    return b"\xa1" + bytes([len(raw)]) + raw


def _sym8(raw: bytes) -> bytes:
    return b"\xa3" + bytes([len(raw)]) + raw


def _compound(code: int, *items: bytes) -> bytes:
    body = b"".join(items)
    return bytes([code, len(body) + 1, len(items)]) + body


def bad_utf8_message(body: bytes) -> bytes:
    """An encoded message whose message-id, subject, reply-to, content-type and one
    application property hold bytes that are not UTF-8 (Latin-1 é, ÿ, þ)."""
    properties = _compound(0xC0, _str8(b"id-\xe9"), _NULL, _NULL, _str8(b"subj-\xe9"), _str8(b"reply-\xff"),
                           _NULL, _sym8(b"text/\xe9"))
    application = _compound(0xC1, _str8(b"k\xe9"), _str8(b"v\xff\xfe"))
    return (b"\x00\x53\x70\x45" + b"\x00\x53\x73" + properties + b"\x00\x53\x74" + application
            + b"\x00\x53\x75\xa0" + bytes([len(body)]) + body)


# ---- pure ------------------------------------------------------------------------------
def test_peer_text_is_utf8_else_latin1() -> None:
    assert peer_text.peer_text("é".encode()) == "é"
    assert peer_text.peer_text(b"\xe9\xff") == "éÿ"
    assert peer_text.peer_text(b"\xe9\xff").encode("latin-1") == b"\xe9\xff"  # lossless


def test_proton_alone_refuses_the_message_ackbridge_reads_it() -> None:
    raw = bad_utf8_message(b"payload")
    with pytest.raises(UnicodeDecodeError):
        Message().decode(raw)
    got = codec.from_bytes(raw, wire_tag=7, generation=3, source="q", count_header=False)
    assert (got.wire_tag, got.generation, got.body) == (7, 3, b"payload")
    assert got.message_id == "id-é" and got.routing_key == "subj-é" and got.reply_to == "reply-ÿ"
    assert got.content_type == "text/é" and got.headers == {"ké": "vÿþ"}
    assert cproton.utf82string is ORIGINAL_UTF82STRING
    assert Data.get_mappings[Data.STRING] is Data.get_string  # proton's own reader is left as it is


def test_a_string_body_that_is_not_utf8_comes_as_its_bytes() -> None:
    raw = b"\x00\x53\x77" + _str8(b"\xff\xfe")  # amqp-value string section
    assert codec.from_bytes(raw, wire_tag=1, generation=1, source="q", count_header=False).body == b"\xff\xfe"


def test_conditions_without_the_c_object_are_read_strictly_with_a_fallback() -> None:
    class Bad:
        @property
        def remote_condition(self) -> Condition:
            raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid")

        condition = remote_condition

    class Good:
        remote_condition = condition = Condition("amqp:not-found", "gone")

    for read in (peer_text.remote_condition, peer_text.transport_condition, peer_text.disposition_condition):
        assert read(Good()) == Condition("amqp:not-found", "gone")
        found = read(Bad())
        assert found is not None and found.name == peer_text.UNDECODABLE


# ---- a proton peer on loopback -------------------------------------------------------------
@pytest.fixture
def toy() -> Iterator[ToyPeer]:
    peer = ToyPeer()
    yield peer
    peer.stop()


def test_bad_utf8_from_the_peer_is_delivered_and_proton_is_untouched(toy: ToyPeer) -> None:
    toy.enqueue_raw(bad_utf8_message(b"first"))
    with connect(f"amqp10://127.0.0.1:{toy.port}", peer="generic") as conn:
        assert conn.publish("q", b"second").result(15).confirmed
        consumer = conn.consume("q", prefetch=2)
        first = consumer.get(timeout=10)
        assert first is not None and first.body == b"first"
        assert first.headers == {"ké": "vÿþ"} and first.message_id == "id-é" and first.content_type == "text/é"
        first.ack()
        second = consumer.get(timeout=10)
        assert second is not None and second.body == b"second"
        second.ack()
        assert faults(conn).generation == 1 and transport_of(conn).live == 1  # type: ignore[attr-defined]
        eventually(lambda: len(toy.handler.dispositions) == 2, message="both settled")
    assert toy.handler.dispositions == [Delivery.ACCEPTED, Delivery.ACCEPTED]
    assert cproton.utf82string is ORIGINAL_UTF82STRING


def test_an_undecodable_transfer_is_rejected_with_its_reason(toy: ToyPeer, monkeypatch: pytest.MonkeyPatch) -> None:
    real = codec.from_bytes

    def from_bytes(raw: bytes, **kwargs: Any) -> Any:
        if b"poison" in raw:
            raise codec.MessageException("not an AMQP message")
        return real(raw, **kwargs)

    monkeypatch.setattr(codec, "from_bytes", from_bytes)
    with connect(f"amqp10://127.0.0.1:{toy.port}", peer="generic") as conn:
        for body in (b"poison", b"fine"):
            assert conn.publish("q", body).result(15).confirmed
        consumer = conn.consume("q", prefetch=1)  # credit must come back for the rejected one
        got = consumer.get(timeout=10)
        assert got is not None and got.body == b"fine"
        got.ack()
        eventually(lambda: len(toy.handler.dispositions) == 2, message="both settled")
    assert toy.handler.dispositions == [Delivery.REJECTED, Delivery.ACCEPTED]
    reason = toy.handler.rejections[0]
    assert reason.name == "amqp:decode-error" and "not an AMQP message" in reason.description


# ---- RabbitMQ 3.10.8 ---------------------------------------------------------------------
def test_rabbitmq_latin1_error_text_reaches_the_caller(harness: Amqp10Harness) -> None:
    """RabbitMQ 3.10 writes a non-ASCII queue name into its not-found description as
    Latin-1: the refusal arrives as a BrokerError with the name readable, and only the
    link's session ends (the connection keeps its generation)."""
    missing = f"ab10-missing-{uuid.uuid4().hex[:6]}" + "é" * 100
    with connect(harness.url(), **harness.connect_options()) as conn:
        with pytest.raises(BrokerError, match="not-found") as err:
            conn.consume(f"/amq/queue/{missing}")
        assert "éééé" in str(err.value)
        assert transport_of(conn).live == 1  # type: ignore[attr-defined]
        queue = harness.new_queue()
        assert conn.publish(queue, b"still works").result(30).confirmed
    assert cproton.utf82string is ORIGINAL_UTF82STRING


def test_sever_through_the_fault_seam(harness: Amqp10Harness) -> None:
    queue = harness.new_queue()
    with connect(harness.url(), **harness.connect_options()) as conn:
        assert conn.publish(queue, b"cut").result(30).confirmed
        consumer = conn.consume(queue, prefetch=5)
        old = consumer.get(timeout=15)
        assert old is not None and old.generation == 1
        seam = faults(conn)
        seam.sever("test cut")
        with pytest.raises(StaleDeliveryError):
            old.ack()
        again = consumer.get(timeout=20)
        assert again is not None and again.body == b"cut" and again.generation == 2 and again.redelivered
        assert seam.generation == 2
        again.ack()
        eventually(lambda: queue_counts().get(queue_name(queue), (0, 0)) == (0, 0), message="queue empty")
