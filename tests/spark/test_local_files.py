"""Batches go to their tasks as files only once a task was seen running in the runner's JVM
(ackbridge_spark/push/local_files.py; issue 39, item 5). Without Spark: the probe, the mark,
the threshold and the clean-up. The query that uses them is in test_source.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _local_files() -> Any:
    # Imported here: the lowest-versions tier collects this file without the connector.
    from ackbridge_spark.push import local_files

    return local_files


@pytest.fixture
def in_spark_jvm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """This process as a Python worker of a JVM whose block manager lives in *tmp_path*."""
    dirs = str(tmp_path / "blockmgr-runner")
    monkeypatch.setenv("SPARK_LOCAL_DIRS", dirs)
    return dirs


def test_outside_spark_nothing_is_probed_and_every_batch_stays_in_its_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    lf = _local_files()
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    files = lf.LocalFiles(enabled=True)
    assert files.probe() is None
    assert files.file_for(0, 10, 100 * lf.MIN_FILE_BYTES) is None
    assert files.directory is None


def test_disabled_nothing_is_probed(in_spark_jvm: str) -> None:
    lf = _local_files()
    files = lf.LocalFiles(enabled=False)
    assert files.probe() is None and files.directory is None


def test_a_task_in_another_jvm_leaves_no_mark_and_batches_stay_in_their_tasks(
        in_spark_jvm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lf = _local_files()
    files = lf.LocalFiles(enabled=True)
    probe = files.probe()
    assert probe is not None and os.path.isdir(probe[0])
    try:
        # An executor: its own block manager directories (another JVM), maybe on the same host.
        monkeypatch.setenv("SPARK_LOCAL_DIRS", in_spark_jvm + "-executor")
        lf.mark_if_local(probe)
        assert not os.path.exists(os.path.join(probe[0], lf.MARK))
        assert files.file_for(0, 10, 10 * lf.MIN_FILE_BYTES) is None
        assert files.probe() == probe  # still asking
    finally:
        files.close()
    assert not os.path.exists(probe[0])


def test_a_task_in_the_runners_jvm_marks_and_large_batches_go_as_files_deleted_on_commit(in_spark_jvm: str) -> None:
    lf = _local_files()
    files = lf.LocalFiles(enabled=True)
    probe = files.probe()
    assert probe is not None
    lf.mark_if_local(probe)  # same JVM: the task ran in local mode
    assert os.path.exists(os.path.join(probe[0], lf.MARK))
    assert files.file_for(0, 10, lf.MIN_FILE_BYTES - 1) is None  # small: pickled into its task still
    first = files.file_for(0, 10, lf.MIN_FILE_BYTES)
    second = files.file_for(10, 20, 5 * lf.MIN_FILE_BYTES)
    assert first is not None and second is not None and os.path.dirname(first) == probe[0]
    assert files.tasks_local and files.probe() is None  # known: no more probes
    for path in (first, second):
        Path(path).write_bytes(b"rows")
    files.committed(10)
    assert not os.path.exists(first) and os.path.exists(second)
    files.close()
    assert not os.path.exists(probe[0])


def test_a_mark_for_a_stopped_runner_is_not_an_error(in_spark_jvm: str) -> None:
    lf = _local_files()
    files = lf.LocalFiles(enabled=True)
    probe = files.probe()
    assert probe is not None
    files.close()
    lf.mark_if_local(probe)  # the task ran after the reader stopped: nothing to tell, nothing raised
    assert not os.path.exists(probe[0])


def test_local_files_option_is_a_boolean() -> None:
    from ackbridge.errors import InvalidOptionError
    from ackbridge_spark.options import parse

    base = {"url": "local:///tmp/x.db", "queue": "q"}
    assert parse(base, check_plugin=False).local_files is True
    assert parse({**base, "localFiles": "false"}, check_plugin=False).local_files is False
    with pytest.raises(InvalidOptionError, match="localFiles"):
        parse({**base, "localFiles": "sometimes"}, check_plugin=False)


def test_a_killed_runners_directory_is_removed_by_the_next_runner(in_spark_jvm: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys
    import tempfile

    lf = _local_files()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{lf.PREFIX}{int(gone.stdout)}-abc123"
    alive = tmp_path / f"{lf.PREFIX}{os.getpid()}-def456"
    stranger = tmp_path / f"{lf.PREFIX}notapid-x"
    for folder in (dead, alive, stranger):
        folder.mkdir()
        (folder / "batch-1-2.arrow").write_bytes(b"rows")
    files = lf.LocalFiles(enabled=True)
    probe = files.probe()
    assert probe is not None and Path(probe[0]).parent == tmp_path
    assert not dead.exists()  # its runner's pid is gone
    assert alive.exists() and stranger.exists()  # a live runner's, and one not named by a pid
    files.close()


def test_a_temporary_folder_that_fails_leaves_every_batch_in_its_tasks(
        in_spark_jvm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import tempfile

    lf = _local_files()
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_bytes(b"")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))
    files = lf.LocalFiles(enabled=True)
    with caplog.at_level("WARNING", logger="ackbridge.spark"):
        assert files.probe() is None  # mkdtemp failed: no probe, no error for the query
    assert "batches stay in their tasks" in caplog.text
    assert files.probe() is None and files.file_for(0, 10, 10 * lf.MIN_FILE_BYTES) is None


def test_giving_up_after_the_mark_removes_the_folder_and_stops_using_files(in_spark_jvm: str) -> None:
    lf = _local_files()
    files = lf.LocalFiles(enabled=True)
    probe = files.probe()
    assert probe is not None
    lf.mark_if_local(probe)
    assert files.file_for(0, 10, lf.MIN_FILE_BYTES) is not None
    files.give_up(OSError(28, "No space left on device"))  # a batch file could not be written
    assert not os.path.exists(probe[0])
    assert files.probe() is None and files.file_for(10, 20, lf.MIN_FILE_BYTES) is None
