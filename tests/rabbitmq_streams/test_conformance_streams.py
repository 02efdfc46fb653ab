"""The shared conformance suite against RabbitMQ streams (within the declared capabilities)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.rabbitmq_streams.harness import StreamsHarness

pytestmark = pytest.mark.rabbitmq_streams


class TestStreamsConformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[StreamsHarness]:
        harness = StreamsHarness()
        yield harness
        harness.cleanup()
