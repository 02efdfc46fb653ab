from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.amqp10.harness import Amqp10Harness

pytestmark = pytest.mark.amqp10


class TestAmqp10Conformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self, broker: None, canary_user: tuple[str, str]) -> Iterator[Amqp10Harness]:
        harness = Amqp10Harness(*canary_user)
        yield harness
        harness.cleanup()
