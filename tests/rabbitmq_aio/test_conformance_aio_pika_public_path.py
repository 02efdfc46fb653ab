"""The conformance suite on the aio-pika transport with aiormq's public publish path forced
(``ACKBRIDGE_AIORMQ_FAST_PATH=0``): a task per publish through ``Channel.basic_publish``, no
aiormq internals. The fallback the fast path's version check falls back to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from ackbridge.testing.faults import transport_of
from ackbridge.testing.twins import Twin, unwrap
from ackbridge_rabbitmq.aio import fastpublish
from tests.rabbitmq_aio.harness import AioPikaHarness

pytestmark = pytest.mark.rabbitmq


class _PublicPath(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture(params=["async"])
    def twin(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Twin]:
        monkeypatch.setenv(fastpublish.ENV, "0")
        twin = Twin(request.param)
        yield twin
        twin.close()

    def test_the_public_path_is_in_use(self, conn: Any) -> None:
        assert transport_of(unwrap(conn)).publishes.fast_path is False  # type: ignore[attr-defined]


class TestAioPikaClassicPublicPath(_PublicPath):
    @pytest.fixture
    def harness(self) -> Iterator[AioPikaHarness]:
        harness = AioPikaHarness("classic")
        yield harness
        harness.cleanup()


class TestAioPikaQuorumPublicPath(_PublicPath):
    @pytest.fixture
    def harness(self) -> Iterator[AioPikaHarness]:
        harness = AioPikaHarness("quorum")
        yield harness
        harness.cleanup()
