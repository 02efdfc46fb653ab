"""Write-ahead files hold message bodies: private to the user unless relaxed.
Plain file tests (no Spark session); the options are parsed as Spark hands them."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ackbridge.errors import InvalidOptionError

pytestmark = pytest.mark.spark


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_ahead_files_and_their_directories_are_private(tmp_path: Path) -> None:
    from ackbridge_spark.atomic_files import write_atomically
    from ackbridge_spark.push.write_ahead import batch_file, remove_through

    directory = tmp_path / "wal" / "nested"
    path = batch_file(str(directory), 0, 10)
    assert path is not None
    write_atomically(path, b"rows")
    assert Path(path).read_bytes() == b"rows"
    assert _mode(Path(path)) == 0o600
    assert _mode(directory) == 0o700 and _mode(directory.parent) == 0o700
    assert [p.name for p in directory.iterdir()] == [Path(path).name]  # no temp file left
    remove_through(str(directory), 10)
    assert not list(directory.iterdir())


def test_write_ahead_file_mode_relaxes_them(tmp_path: Path) -> None:
    from ackbridge_spark.atomic_files import write_atomically
    from ackbridge_spark.options import parse

    opts = parse({"url": "local:///tmp/x.db", "queue": "q", "writeAheadFileMode": "640"})
    assert opts.write_ahead_file_mode == 0o640
    path = tmp_path / "shared" / "batch.arrow"
    write_atomically(str(path), b"rows", opts.write_ahead_file_mode)
    assert _mode(path) == 0o640 and _mode(path.parent) == 0o750


@pytest.mark.parametrize("bad", ["abc", "400", "755", "1600"])
def test_write_ahead_file_mode_refuses_what_breaks_or_executes(bad: str) -> None:
    from ackbridge_spark.options import parse

    with pytest.raises(InvalidOptionError, match="writeAheadFileMode"):
        parse({"url": "local:///tmp/x.db", "queue": "q", "writeAheadFileMode": bad})
