"""amqps on the aio-pika transport, against the real TLS listener of tests/rabbitmq/test_rabbitmq_tls.py
(its module fixture opens it on the running node and closes it again): the plugin's TLS context
(``options.endpoint``, the core's ``tls_context``) is the one aio-pika gets, so verification is on
by default; the broker records a TLS connection."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from ackbridge.connect import connect_async
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from ackbridge.transport.tls import TLSVerificationError
from tests.rabbitmq.harness import TEST_PASSWORD, queue_counts
from tests.rabbitmq.test_rabbitmq_tls import TLSListener, _assert_tls_on_broker, tls_listener  # noqa: F401
from tests.rabbitmq_aio.harness import AioPikaHarness

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def classic() -> Iterator[AioPikaHarness]:
    h = AioPikaHarness("classic")
    yield h
    h.cleanup()


def test_verified_publish_consume_ack(tls_listener: TLSListener, classic: AioPikaHarness) -> None:  # noqa: F811
    queue = classic.new_queue()

    async def run() -> None:
        conn = await connect_async(tls_listener.url(), tls_ca_file=str(tls_listener.ca), reconnect=False,
                                   asyncio_transport="aio-pika")
        try:
            name = transport_of(conn).connection_name  # type: ignore[attr-defined]
            await asyncio.to_thread(_assert_tls_on_broker, tls_listener, name)
            assert (await (await conn.publish(queue, b"over-tls")).result(10)).confirmed
            consumer = await conn.consume(queue, prefetch=1)
            delivery = await consumer.get(10)
            assert delivery is not None and delivery.body == b"over-tls"
            await delivery.ack()
            await consumer.close()
        finally:
            await conn.close()

    asyncio.run(run())
    eventually(lambda: queue_counts().get(queue, (0, 0)) == (0, 0), message="acked broker-side")


@pytest.mark.parametrize(("host", "ca", "reason"), [
    ("127.0.0.1", "other", "self-signed certificate in certificate chain"),  # a CA that did not sign it
    ("127.0.0.1", None, "self-signed certificate in certificate chain"),  # the system CAs: still verified
    ("localhost", "right", "Hostname mismatch"),  # the certificate names IP 127.0.0.1 only
])
def test_verification_is_on_by_default(tls_listener: TLSListener, host: str, ca: str | None,  # noqa: F811
                                       reason: str) -> None:
    ca_file = {"other": tls_listener.other_ca, "right": tls_listener.ca, None: None}[ca]
    options = {"tls_ca_file": str(ca_file)} if ca_file is not None else {}

    async def run() -> None:
        with pytest.raises(TLSVerificationError) as err:
            await connect_async(tls_listener.url(host), connect_timeout=5, reconnect=False,
                                asyncio_transport="aio-pika", **options)
        assert reason in str(err.value)
        assert TEST_PASSWORD not in str(err.value) and TEST_PASSWORD not in repr(err.value)

    asyncio.run(run())


def test_tls_verify_false_warns_and_connects(tls_listener: TLSListener) -> None:  # noqa: F811
    async def run() -> None:
        with pytest.warns(UserWarning, match="NOT verified"):
            conn = await connect_async(tls_listener.url("localhost"), tls_verify=False, reconnect=False,
                                       asyncio_transport="aio-pika")
        try:
            name = transport_of(conn).connection_name  # type: ignore[attr-defined]
            await asyncio.to_thread(_assert_tls_on_broker, tls_listener, name)
        finally:
            await conn.close()

    asyncio.run(run())
