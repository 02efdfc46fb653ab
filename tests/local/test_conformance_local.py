from collections.abc import Iterator
from pathlib import Path

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.local.harness import LocalHarness


class TestEmbeddedConformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[LocalHarness]:
        harness = LocalHarness(tmp_path)
        yield harness
        harness.cleanup()
