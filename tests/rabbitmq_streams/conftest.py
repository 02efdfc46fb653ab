"""RabbitMQ streams tests need the stream plugin on 127.0.0.1:5552: skipped locally without it, a FAILURE in CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import require_port
from tests.rabbitmq_streams.streams import StreamAdmin


@pytest.fixture(autouse=True)
def streams_running() -> None:
    require_port(5552, "RabbitMQ's stream plugin (rabbitmq-plugins enable rabbitmq_stream)")


@pytest.fixture
def admin() -> Iterator[StreamAdmin]:
    """Creates streams with unique names and deletes every one of them afterwards."""
    with StreamAdmin() as found:
        yield found
