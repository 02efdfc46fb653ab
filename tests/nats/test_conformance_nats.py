"""The shared conformance suite against nats-server with JetStream."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats


class TestNatsConformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[NatsHarness]:
        harness = NatsHarness()
        yield harness
        harness.cleanup()
