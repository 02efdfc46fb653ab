"""Files and directories the embedded broker and the demo create are the user's alone by default."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import ackbridge
from ackbridge.errors import InvalidOptionError
from ackbridge.transport.files import create_private_file, dir_mode_for, parse_mode, private_dir, write_private_bytes

ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def broker_files(db: Path) -> list[Path]:
    return [p for p in db.parent.iterdir() if p.name.startswith(db.name)]


def test_broker_file_wal_shm_marker_and_directories_are_private(tmp_path: Path) -> None:
    db = tmp_path / "made" / "here" / "broker.db"
    with ackbridge.connect(f"local://{db}") as conn:
        assert conn.publish("q", b"secret").result(timeout=30).confirmed
        files = broker_files(db)
        assert {p.name for p in files} >= {"broker.db", "broker.db-wal", "broker.db-shm", "broker.db.ackbridge-id"}
        for path in files:
            assert mode(path) == 0o600, (path, oct(mode(path)))
    for directory in (tmp_path / "made", tmp_path / "made" / "here"):
        assert mode(directory) == 0o700, (directory, oct(mode(directory)))


def test_file_mode_option_relaxes_them(tmp_path: Path) -> None:
    db = tmp_path / "shared" / "broker.db"
    with ackbridge.connect(f"local://{db}?file_mode=0640") as conn:
        assert conn.publish("q", b"x").result(timeout=30).confirmed
        for path in broker_files(db):
            assert mode(path) == 0o640, (path, oct(mode(path)))
    assert mode(tmp_path / "shared") == 0o750


def test_file_mode_must_leave_the_owner_read_and_write(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="file_mode"):
        ackbridge.connect(f"local://{tmp_path}/b.db?file_mode=0400")
    with pytest.raises(InvalidOptionError, match="file_mode"):
        ackbridge.connect(f"local://{tmp_path}/b.db?file_mode=rw")


def test_core_file_helpers_ignore_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        made = private_dir(tmp_path / "a" / "b")
        assert mode(tmp_path / "a") == 0o700 and mode(made) == 0o700
        write_private_bytes(made / "wal", b"data", durable=True)
        assert mode(made / "wal") == 0o600 and (made / "wal").read_bytes() == b"data"
        assert create_private_file(made / "f", 0o640) and mode(made / "f") == 0o640
        assert not create_private_file(made / "f")
    finally:
        os.umask(old)
    assert parse_mode("0o640") == parse_mode("640") == 0o640 and dir_mode_for(0o640) == 0o750


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_output_is_private(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    done = subprocess.run([ACKBRIDGE, "demo", "-n", "50", "--workdir", str(work)], capture_output=True, text=True,
                          timeout=600, check=False, env=dict(os.environ, COLUMNS="200"))
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert (work / "broker.db").exists() and (work / "table").is_dir() and (work / "checkpoint").is_dir()
    exposed = [(str(p), oct(mode(p))) for p in [work, *work.rglob("*")] if mode(p) & 0o077]
    assert exposed == []
