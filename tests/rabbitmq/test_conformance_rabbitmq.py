"""The core conformance suite against RabbitMQ, classic and quorum queues, sync and async."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.rabbitmq.harness import RabbitHarness

pytestmark = pytest.mark.rabbitmq


class TestRabbitClassic(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[RabbitHarness]:
        harness = RabbitHarness("classic")
        yield harness
        harness.cleanup()


class TestRabbitQuorum(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[RabbitHarness]:
        harness = RabbitHarness("quorum")
        yield harness
        harness.cleanup()
