"""MQTT tests need Mosquitto on 127.0.0.1:1883: skipped locally without it, a FAILURE in CI."""

from __future__ import annotations

import pytest

from tests.conftest import require_port


@pytest.fixture(autouse=True)
def mosquitto_running() -> None:
    require_port(1883, "Mosquitto")
