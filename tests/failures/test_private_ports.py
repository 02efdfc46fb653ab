"""Private servers' ports (tests/failures/private_server.py): reserved below the kernel's
ephemeral range, so a server down for a restart gets its port back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.failures import private_server
from tests.failures.private_server import RESERVATIONS, _ephemeral_start, release_port, reserve_port


def test_a_reserved_port_is_below_the_ephemeral_range_and_held_until_released() -> None:
    ports = [reserve_port() for _ in range(20)]
    try:
        assert len(set(ports)) == len(ports), ports
        assert all(port < _ephemeral_start() for port in ports), ports
        assert all((RESERVATIONS / str(port)).exists() for port in ports)
    finally:
        for port in ports:
            release_port(port)
    assert not any((RESERVATIONS / str(port)).exists() for port in ports)


def test_a_dead_holders_reservation_is_skipped_then_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    # A holder that died without releasing: its pid no longer runs.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    port = reserve_port()
    (RESERVATIONS / str(port)).write_text(dead)
    other = reserve_port()
    release_port(other)
    # The draws: the dead holder's port (skipped, its file removed), the other, then the dead one again.
    draws = iter([port, other, port])
    monkeypatch.setattr(private_server.random, "randint", lambda low, high: next(draws))
    try:
        assert reserve_port() == other
        assert not (RESERVATIONS / str(port)).exists(), "a dead holder's reservation was not removed"
        assert reserve_port() == port
        assert (RESERVATIONS / str(port)).read_text() == str(os.getpid())
    finally:
        release_port(port)
        release_port(other)


def test_a_live_holders_reservation_is_never_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    port, other = reserve_port(), reserve_port()
    release_port(other)
    draws = iter([port, other])
    monkeypatch.setattr(private_server.random, "randint", lambda low, high: next(draws))
    try:
        assert reserve_port() == other
        assert (RESERVATIONS / str(port)).read_text() == str(os.getpid())
    finally:
        release_port(port)
        release_port(other)
