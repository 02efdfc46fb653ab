"""Fixtures of the Spark connector tests (helpers live in helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI

from .helpers import HAVE_JAVA, Broker, LocalBroker, RabbitBroker, rabbit_ready

if not HAVE_JAVA:
    if IN_CI:
        raise RuntimeError("Java is needed for the Spark tests (scripts/setup.sh installs it)")
    pytest.skip("Java is needed for the Spark tests", allow_module_level=True)

BROKERS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
]


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    if request.param == "rabbitmq":
        why = rabbit_ready()
        if why:
            if IN_CI:
                pytest.fail(f"RabbitMQ is needed in CI: {why}")
            pytest.skip(why)
        b: Broker = RabbitBroker()
    else:
        b = LocalBroker(tmp_path)
    try:
        yield b
    finally:
        b.close()  # type: ignore[attr-defined]


