"""The broker file is never opened outside SQLite while SQLite may hold it.

Closing any descriptor of a file drops every POSIX lock the process holds on
it, SQLite's included; processes then write without their locks and corrupt
the database (seen as "database disk image is malformed" when two Spark tasks
published to one embedded broker). The identity checks must therefore stat
the file, never open it.
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.testing.faults import transport_of


def test_identity_checks_never_open_the_broker_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "broker.db"
    first = ackbridge.connect(f"local://{db}", fsync=False)
    try:
        assert first.publish("q", b"x").result(timeout=30).confirmed
        opened: list[str] = []
        real_open, real_os_open = builtins.open, os.open

        # Only opens that give a descriptor count: an O_EXCL create that fails
        # because the file exists never held one, so it cannot drop a lock.
        def spy_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            handle = real_open(file, *args, **kwargs)
            opened.append(os.fspath(file) if isinstance(file, (str, os.PathLike)) else repr(file))
            return handle

        def spy_os_open(path: Any, *args: Any, **kwargs: Any) -> int:
            fd = real_os_open(path, *args, **kwargs)
            opened.append(os.fspath(path))
            return fd

        monkeypatch.setattr(builtins, "open", spy_open)
        monkeypatch.setattr(os, "open", spy_os_open)
        # A second connection in the same process, a publish, a consume and the
        # periodic file check: the moments the identity checks run.
        second = ackbridge.connect(f"local://{db}", fsync=False)
        try:
            assert second.publish("q", b"y").result(timeout=30).confirmed
            consumer = second.consume("q", prefetch=10)
            delivery = consumer.get(timeout=30)
            assert delivery is not None
            delivery.ack()
            transport_of(second).store.check_file()  # type: ignore[attr-defined]
        finally:
            second.close()
        monkeypatch.undo()
        assert str(db) not in opened, "the broker file was opened outside SQLite"
    finally:
        first.close()
