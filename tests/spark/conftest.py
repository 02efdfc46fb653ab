"""Fixtures of the Spark connector tests (helpers live in helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI

from .helpers import (  # noqa: F401  (cell and fault_broker are fixtures)
    HAVE_JAVA,
    Broker,
    LocalBroker,
    RabbitBroker,
    cell,
    fault_broker,
    rabbit_ready,
)

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




@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """Keep each phase's report on the item: the ``cell`` fixture turns failures into scoreboard rows."""
    report: pytest.TestReport = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def rabbit() -> Iterator[RabbitBroker]:
    """A RabbitMQ broker handle (a missing broker fails the test, never skips it)."""
    why = rabbit_ready()
    if why:
        pytest.fail(why)
    broker = RabbitBroker()
    yield broker
    broker.close()
