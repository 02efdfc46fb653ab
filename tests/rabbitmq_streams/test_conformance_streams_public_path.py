"""The shared conformance suite against RabbitMQ streams with rstream's public path forced
(``ACKBRIDGE_RSTREAM_FAST_PATH=0``): rstream's own AMQP 1.0 encoder and decoder and
``Client.publish``, none of the hand-written sections (fastpath.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from ackbridge.testing.faults import transport_of
from ackbridge.testing.twins import Twin
from ackbridge_rabbitmq_streams import fastpath
from tests.fastpath_env import public_path_twin
from tests.rabbitmq_streams.harness import StreamsHarness

pytestmark = pytest.mark.rabbitmq_streams


class TestStreamsConformancePublicPath(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture(params=["sync", "async"])
    def twin(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Twin]:
        yield from public_path_twin(request, monkeypatch, fastpath.ENV)

    @pytest.fixture
    def harness(self) -> Iterator[StreamsHarness]:
        harness = StreamsHarness()
        yield harness
        harness.cleanup()

    def test_the_public_path_is_in_use(self, conn: object) -> None:
        assert transport_of(conn).fast_path is False  # type: ignore[attr-defined]
