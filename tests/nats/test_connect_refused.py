"""A wrong NATS port fails at once, as on the other plugins, instead of waiting out
connect_timeout: nats-py's first connect retried a refused server every 2 s until the
timeout. Counted, not timed: the connect attempts nats-py reports (its error callback,
logged at debug on ``ackbridge.nats``) are two at most, where the timeout allowed six."""

from __future__ import annotations

import logging
import socket

import pytest

import ackbridge
from ackbridge.errors import BrokerUnreachableError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_nothing_listening_is_unreachable_after_at_most_two_attempts(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    caplog.set_level(logging.DEBUG, logger="ackbridge.nats")
    with pytest.raises(BrokerUnreachableError, match="connection refused"):
        ackbridge.connect(f"nats://127.0.0.1:{port}?connect_timeout=12")
    attempts = [r for r in caplog.records if "nats-py reported" in r.getMessage()]
    assert 1 <= len(attempts) <= 2, [r.getMessage() for r in attempts]
