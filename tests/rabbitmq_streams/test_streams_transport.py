"""The RabbitMQ streams transport beyond the shared suite: offset specs, the
stored offset as the broker holds it, resuming, redelivery after a cut,
exact prefetch inside a chunk, named publishers, unsupported verbs, TLS."""

from __future__ import annotations

import ssl
import uuid

import pytest

import ackbridge
from ackbridge.errors import (
    BrokerUnreachableError,
    ConfigurationError,
    ConnectionLostError,
    InvalidOptionError,
    UnsupportedVerbError,
)
from ackbridge.messages import ConfirmStatus
from ackbridge.options import ConnectionSettings
from ackbridge.testing.faults import faults
from ackbridge.testing.harness import eventually
from ackbridge.testing.proxy import FaultProxy
from ackbridge.urls import parse_url
from ackbridge_rabbitmq_streams.options import Endpoint
from tests.rabbitmq_streams.streams import URL, StreamAdmin

pytestmark = pytest.mark.rabbitmq_streams


def _ref() -> str:
    return f"ref-{uuid.uuid4().hex[:8]}"


def _get(consumer: object, n: int) -> list[object]:
    got = []
    for _ in range(n):
        delivery = consumer.get(timeout=10)  # type: ignore[attr-defined]
        assert delivery is not None, f"only {len(got)} of {n} arrived"
        got.append(delivery)
    return got


@pytest.fixture
def stream(admin: StreamAdmin) -> str:
    name = admin.new_stream()
    admin.publish_batches(name, [5, 5])
    return name


def test_offset_spec_option(stream: str) -> None:
    with ackbridge.connect(URL, reference=_ref(), offset="7") as conn:
        assert [d.body for d in _get(conn.consume(stream), 3)] == [b"m7", b"m8", b"m9"]
    with ackbridge.connect(URL, reference=_ref(), offset="next") as conn:
        consumer = conn.consume(stream)
        assert consumer.get(timeout=0.5) is None
        conn.publish(stream, b"new").result(timeout=10)
        assert consumer.get(timeout=10).body == b"new"


def test_acks_store_the_contiguous_offset_and_a_new_consumer_resumes(admin: StreamAdmin, stream: str) -> None:
    reference = _ref()
    with ackbridge.connect(URL, reference=reference) as conn:
        got = _get(conn.consume(stream, prefetch=10), 5)
        got[0].ack()
        got[2].ack()  # a gap before it: the stored offset stays at 0
        eventually(lambda: admin.broker_offset(stream, reference) == 0, message="offset 0 stored")
        got[1].ack()
        eventually(lambda: admin.broker_offset(stream, reference) == 2, message="offset 2 stored")
    # Deliveries 3 and 4 were never acked: the next consumer with the reference gets them again.
    with ackbridge.connect(URL, reference=reference) as conn:
        again = _get(conn.consume(stream, prefetch=10), 7)
        assert [d.body for d in again] == [f"m{i}".encode() for i in range(3, 10)]
        conn.consume(stream).close()


def test_a_cut_redelivers_what_was_not_acked(stream: str) -> None:
    with FaultProxy(5552) as proxy, ackbridge.connect(
            f"rabbitmq-stream://guest:guest@127.0.0.1:{proxy.port}/", reference=_ref()) as conn:
        consumer = conn.consume(stream, prefetch=3)
        _get(consumer, 3)
        seam = faults(conn)
        before = seam.generation
        proxy.reset()
        eventually(lambda: seam.generation != before, message="the cut noticed")
        again = _get(consumer, 3)
        assert [d.body for d in again] == [b"m0", b"m1", b"m2"]
        assert all(d.redelivered for d in again)
        for delivery in again:
            delivery.ack()
        fresh = _get(consumer, 1)[0]
        assert fresh.body == b"m3" and not fresh.redelivered


def test_prefetch_is_exact_inside_one_chunk(admin: StreamAdmin) -> None:
    name = admin.new_stream()
    admin.publish_batches(name, [10])  # one chunk of ten
    with ackbridge.connect(URL, reference=_ref()) as conn:
        consumer = conn.consume(name, prefetch=3)
        got = _get(consumer, 3)
        assert consumer.get(timeout=0.5) is None
        got[0].ack()
        assert _get(consumer, 1)[0].body == b"m3"


def test_requeue_and_reject_are_unsupported_with_the_reason(stream: str) -> None:
    with ackbridge.connect(URL, reference=_ref()) as conn:
        delivery = _get(conn.consume(stream), 1)[0]
        with pytest.raises(UnsupportedVerbError, match="append-only log"):
            delivery.requeue()
        with pytest.raises(UnsupportedVerbError, match="dead-letter"):
            delivery.reject()


def test_named_publisher_numbering_goes_on_across_connections(admin: StreamAdmin) -> None:
    name = admin.new_stream()
    for round_ in range(2):
        with ackbridge.connect(URL, publisher_name="orders-app") as conn:
            publisher = conn.publisher()
            confirms = [publisher.publish(name, f"r{round_}-{i}".encode()) for i in range(3)]
            assert publisher.flush(timeout=30)
            assert {c.outcome.status for c in confirms} == {ConfirmStatus.CONFIRMED}
    # Had the second connection started its publishing ids at 1 again, the broker would
    # have confirmed and dropped all three as duplicates.
    assert len(admin.records(name)) == 6


@pytest.mark.parametrize("named", [True, False])
def test_retransmit_after_a_cut_stores_each_message_once_with_a_named_publisher(
        admin: StreamAdmin, named: bool) -> None:
    name = admin.new_stream()
    options = {"publisher_name": f"app-{uuid.uuid4().hex[:6]}"} if named else {}
    with FaultProxy(5552) as proxy, ackbridge.connect(
            f"rabbitmq-stream://guest:guest@127.0.0.1:{proxy.port}/", **options) as conn:
        publisher = conn.publisher(retransmit=True, confirm_timeout=5.0, retransmit_deadline=60.0)
        seam = faults(conn)
        # The first publish declares the stream's publisher (a round trip the held replies would stall).
        assert publisher.publish(name, b"warm-up").result(timeout=10).status is ConfirmStatus.CONFIRMED
        with proxy.held_replies():
            confirms = [publisher.publish(name, f"x{i}".encode()) for i in range(20)]
            eventually(lambda: len(admin.records(name)) == 21, message="all 20 stored, confirms held")
            before = seam.generation
            proxy.reset()
            eventually(lambda: seam.generation != before, message="the cut noticed")
        outcomes = [c.result(timeout=60) for c in confirms]
    assert {o.status for o in outcomes} == {ConfirmStatus.CONFIRMED}
    stored = len(admin.records(name)) - 1
    if named:
        assert stored == 20, "the named publisher's retransmits were recognised as stored"
        assert all("duplicate" in o.reason for o in outcomes)
    else:
        assert stored == 40, "without a name every retransmit is a new message (consumers dedupe by id)"


def test_declare_and_delete(admin: StreamAdmin) -> None:
    name = admin.name_only()
    with ackbridge.connect(URL) as conn:
        conn.declare_queue(name)
        conn.declare_queue(name)  # exists: kept
        assert admin.exists(name)
        conn.delete_queue(name)
        conn.delete_queue(name)  # missing: not an error
        assert not admin.exists(name)


def test_unknown_option_and_bad_offset() -> None:
    with pytest.raises(InvalidOptionError, match="ofset"):
        ackbridge.connect(URL, ofset="first")
    with pytest.raises(InvalidOptionError, match="offset"):
        ackbridge.connect(URL, offset="middle")


def test_tls_verifies_by_default_and_never_shows_the_password() -> None:
    url = parse_url("rabbitmq-stream+tls://guest:s3cret-tls@127.0.0.1/")
    endpoint = Endpoint.resolve(url, ConnectionSettings.from_options({}))
    assert endpoint.port == 5551
    assert endpoint.tls is not None and endpoint.tls.verify_mode is ssl.CERT_REQUIRED and endpoint.tls.check_hostname
    assert "s3cret-tls" not in repr(endpoint)
    # The plain stream port does not speak TLS: a clear error, no hang, no password.
    with pytest.raises((ConfigurationError, ConnectionLostError)) as failed:
        ackbridge.connect("rabbitmq-stream+tls://guest:s3cret-tls@127.0.0.1:5552/", connect_timeout=3,
                          reconnect=False)
    assert "s3cret-tls" not in str(failed.value)


def test_nothing_listening_is_unreachable() -> None:
    with pytest.raises(BrokerUnreachableError) as failed:
        ackbridge.connect("rabbitmq-stream://guest:s3cret@127.0.0.1:1/", connect_timeout=2)
    assert "s3cret" not in str(failed.value)


@pytest.mark.parametrize("name", ["é" * 10, "\ufffe", "x" * 300, ""])
def test_names_rstream_cannot_carry_are_refused_before_sending(admin: StreamAdmin, name: str) -> None:
    with ackbridge.connect(URL) as conn:
        for call in (lambda: conn.declare_queue(name), lambda: conn.consume(name),
                     lambda: conn.publish(name, b"x")):
            with pytest.raises(ConfigurationError):
                call()
        # The connection is whole afterwards.
        stream = admin.new_stream()
        assert conn.publish(stream, b"still works").result(timeout=10).confirmed
    with ackbridge.open_offset_log(URL) as log, pytest.raises(ConfigurationError):
        log.bounds(name)
    with pytest.raises(ConfigurationError):
        ackbridge.connect(URL, reference="référence")
