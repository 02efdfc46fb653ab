"""NATS tests need nats-server with JetStream on 127.0.0.1:4222: skipped locally without it, a FAILURE in CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import require_port
from tests.nats.harness import NatsHarness


@pytest.fixture(autouse=True)
def nats_running() -> None:
    require_port(4222, "nats-server (JetStream)")


@pytest.fixture
def harness() -> Iterator[NatsHarness]:
    h = NatsHarness()
    yield h
    h.cleanup()
