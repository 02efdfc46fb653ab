"""NATS tests need nats-server with JetStream on 127.0.0.1:4222: skipped locally without it, a FAILURE in CI."""

from __future__ import annotations

import pytest

from tests.conftest import require_port


@pytest.fixture(autouse=True)
def nats_running() -> None:
    require_port(4222, "nats-server (JetStream)")
