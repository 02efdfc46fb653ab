"""The core conformance suite against NATS with nats-py's public path forced
(``ACKBRIDGE_NATS_FAST_PATH=0``): subscriptions with a callback on nats-py's
task, settlements through ``Client.publish``. Both faces run the same transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.faults import transport_of
from ackbridge.testing.twins import Twin
from ackbridge_nats import fastpath
from tests.fastpath_env import public_path_twin
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats


class TestNatsConformancePublicPath(ConformanceSuite):
    @pytest.fixture(params=["sync", "async"])
    def twin(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Twin]:
        yield from public_path_twin(request, monkeypatch, fastpath.ENV)

    @pytest.fixture
    def harness(self) -> Iterator[NatsHarness]:
        harness = NatsHarness()
        yield harness
        harness.cleanup()

    def test_the_public_path_is_in_use(self, conn: object) -> None:
        transport: Any = transport_of(conn)
        assert getattr(transport, "inner", transport).fast_path is False
