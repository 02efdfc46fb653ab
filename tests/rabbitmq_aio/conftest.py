"""RabbitMQ tests need the broker on 127.0.0.1:5672: fail in CI (CI=true), skip locally."""

from __future__ import annotations

import pytest

from tests.conftest import require_port


@pytest.fixture(autouse=True)
def _rabbitmq_running() -> None:
    require_port(5672, "RabbitMQ")
    require_port(15672, "RabbitMQ management API")
