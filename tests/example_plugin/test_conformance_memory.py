"""The shared conformance suite against the example third-party plugin (``memory://``), unchanged.

What docs/plugins.md promises an outside author: subclass the suite, give it a harness,
and every behaviour test runs on the sync client and the async twin. Verbs the plugin
declares unsupported (reject, refused confirms, delivery counts, labelled acks) are
checked by the suite itself: the clear UnsupportedVerbError instead of the behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.example_plugin.harness import MemoryHarness


class TestMemoryConformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[MemoryHarness]:
        harness = MemoryHarness()
        yield harness
        harness.cleanup()
