"""The core conformance suite against RabbitMQ's sync transport with pika's public
path forced (``ACKBRIDGE_PIKA_FAST_PATH=0``): no pika internals, plain
``SelectConnection`` and ``basic_publish``. The async transport does not use pika,
so only the sync twin runs here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.faults import transport_of
from ackbridge.testing.twins import Twin
from ackbridge_rabbitmq import fastpath
from tests.rabbitmq.harness import RabbitHarness

pytestmark = pytest.mark.rabbitmq


class _PublicPath(ConformanceSuite):
    @pytest.fixture(params=["sync"])
    def twin(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Twin]:
        monkeypatch.setenv(fastpath.ENV, "0")
        twin = Twin(request.param)
        yield twin
        twin.close()

    def test_the_public_path_is_in_use(self, conn: object) -> None:
        assert transport_of(conn).fast_path is False  # type: ignore[attr-defined]


class TestRabbitClassicPublicPath(_PublicPath):
    @pytest.fixture
    def harness(self) -> Iterator[RabbitHarness]:
        harness = RabbitHarness("classic")
        yield harness
        harness.cleanup()


class TestRabbitQuorumPublicPath(_PublicPath):
    @pytest.fixture
    def harness(self) -> Iterator[RabbitHarness]:
        harness = RabbitHarness("quorum")
        yield harness
        harness.cleanup()
