"""The core conformance suite (base, labels, batch, flow, guaranteed) against RabbitMQ on the
aio-pika asyncio transport (``asyncio_transport=aio-pika``), classic and quorum queues.

The transport serves the asyncio face only, so only the async twin runs here; every
count the suite asserts is read from the broker (RabbitHarness: rabbitmqctl, management API)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from ackbridge.testing.faults import transport_of
from ackbridge.testing.twins import Twin, unwrap
from ackbridge_rabbitmq.aio import fastpublish
from ackbridge_rabbitmq.aio.transport import RabbitAioPikaTransport
from tests.rabbitmq_aio.harness import AioPikaHarness

pytestmark = pytest.mark.rabbitmq


class _OnAioPika(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture(params=["async"])
    def twin(self, request: pytest.FixtureRequest) -> Iterator[Twin]:
        twin = Twin(request.param)
        yield twin
        twin.close()

    def test_the_aio_pika_transport_is_in_use(self, conn: Any) -> None:
        transport = transport_of(unwrap(conn))
        assert isinstance(transport, RabbitAioPikaTransport)
        assert transport.publishes.fast_path is fastpublish.SUPPORT.available


class TestAioPikaClassic(_OnAioPika):
    @pytest.fixture
    def harness(self) -> Iterator[AioPikaHarness]:
        harness = AioPikaHarness("classic")
        yield harness
        harness.cleanup()


class TestAioPikaQuorum(_OnAioPika):
    @pytest.fixture
    def harness(self) -> Iterator[AioPikaHarness]:
        harness = AioPikaHarness("quorum")
        yield harness
        harness.cleanup()


def test_the_fast_path_is_supported_here() -> None:
    """The suite above runs the fast path (aiormq internals): the installed aiormq passes the check."""
    assert fastpublish.SUPPORT.available, fastpublish.SUPPORT.reason


def test_another_aiormq_release_falls_back() -> None:
    found = fastpublish.check("7.3.0")
    assert not found.available and "7.3.0" in found.reason
