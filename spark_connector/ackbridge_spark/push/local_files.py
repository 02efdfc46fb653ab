"""Batches handed to their tasks as files, once the tasks are known to run in the runner's own JVM.

Rows pickled into their tasks pass through the driver JVM (task serialisation and
the scheduler) and down the Python worker's pipe. At 1,000,000 x 4 KiB that cost more
CPU than the hand-written job a data engineer would write instead spent on everything
(docs/benchmarks.md, "Batches as files in local mode"). A file of the batch, which the
task memory-maps, skips both. A file can only be read where the runner's disk is,
though, and on a cluster tasks run in executors: other JVMs, usually other hosts. So
the runner first finds out where its tasks run:

* each partition whose rows travel in its task also carries a *probe*: the runner's
  private directory and its host key (the host name and ``SPARK_LOCAL_DIRS``, the
  block manager directories of the JVM that started the Python process: each JVM
  makes its own, so an executor's differ from the driver's even on the driver's host);
* a task whose host key is the runner's runs in the driver's JVM. That happens only in
  local mode, where every task runs there. It leaves a mark in the directory;
* once the runner finds the mark, batches of at least :data:`MIN_FILE_BYTES` are
  written into the directory and their partitions carry only the path.

The files are not fsynced: no restarted query reads them (a new runner makes a new
directory; what an old one planned and Spark never committed was never settled, so
the broker redelivers it). A file is deleted when its batch commits, the directory when
the reader stops, or, when the runner was killed first (a driver killed, or Spark
killing it at ``query.stop()``: pyspark's daemon SIGKILLs a worker the JVM destroys),
by the next runner that makes one.
``writeAheadPath`` (durable files, replayed after a restart) comes first; the option
``localFiles=false`` keeps every batch in its tasks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile

from ackbridge.transport.files import process_alive
from ackbridge_spark.push.write_ahead import batch_file, remove_through

log = logging.getLogger("ackbridge.spark")

#: A smaller batch costs little to pickle into its task: it stays there.
MIN_FILE_BYTES = 1 << 20
#: Left in the runner's directory by a task that ran in the runner's JVM.
MARK = "tasks-run-here"

#: The runner's directory is named PREFIX + its pid + "-" + a random part.
PREFIX = "ackbridge-spark-files-"

#: (the runner's directory, its host key): what an in-task partition carries to its task.
Probe = tuple[str, str]


def host_key() -> str | None:
    """Which JVM started this Python process: its host and block manager directories
    (None outside Spark, where there is no such JVM: no files then)."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS")
    return f"{socket.gethostname()}|{dirs}" if dirs else None


def mark_if_local(probe: Probe) -> None:
    """On the executor: leave the mark when this task runs in the runner's JVM."""
    directory, key = probe
    if host_key() != key:
        return
    with contextlib.suppress(OSError):  # the runner stopped and removed it: nothing to tell
        os.close(os.open(os.path.join(directory, MARK), os.O_CREAT | os.O_WRONLY, 0o600))


def runner_pid(name: str) -> int | None:
    """The pid of the runner that made the directory *name* (None: not a runner's directory)."""
    if not name.startswith(PREFIX):
        return None
    try:
        return int(name[len(PREFIX):].split("-", 1)[0])
    except ValueError:
        return None


def runner_directory() -> str:
    """A new private directory for this runner's batch files (0700: they hold message
    bodies), named by its pid; first, those of runners that are gone are removed."""
    remove_abandoned()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def remove_abandoned(parent: str | None = None) -> None:
    """Remove the directories of runners that died without stopping (a killed driver):
    theirs is a pid no process has any more. Batches in them were never committed, so
    never settled: the broker redelivers those messages, and no one reads the files."""
    parent = parent or tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            pid = runner_pid(name)
            if pid is None:
                continue
            if not process_alive(pid):
                log.info("ackbridge source: removing %s, left by a runner that is gone", name)
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


class LocalFiles:
    """The runner's side: its private directory, whether its tasks were seen running in
    its JVM, and the file (if any) a planned batch goes into."""

    def __init__(self, enabled: bool) -> None:
        self._key = host_key() if enabled else None
        self.directory: str | None = None
        self.tasks_local = False

    def probe(self) -> Probe | None:
        """What in-task partitions carry while the tasks' JVM is not known yet."""
        if self._key is None or self.tasks_local:
            return None
        if self.directory is None:
            try:
                self.directory = runner_directory()
            except OSError as exc:
                self.give_up(exc)
                return None
        return self.directory, self._key

    def file_for(self, s: int, e: int, nbytes: int) -> str | None:
        """The file planned range (s, e] of *nbytes* goes into, or None: it travels in its tasks."""
        if self.directory is None or nbytes < MIN_FILE_BYTES:
            return None
        if not self.tasks_local:
            self.tasks_local = os.path.exists(os.path.join(self.directory, MARK))
            if not self.tasks_local:
                return None
            log.info("ackbridge source: tasks run in this JVM (local mode): batches of %d bytes or more go to "
                     "their tasks as files under %s", MIN_FILE_BYTES, self.directory)
        return batch_file(self.directory, s, e)

    def give_up(self, error: OSError) -> None:
        """The temporary folder failed us (full, read-only): every later batch stays in
        its tasks, as on a cluster; the query goes on."""
        log.warning("ackbridge source: batches stay in their tasks from now on: the temporary folder %s "
                    "failed (%s)", tempfile.gettempdir(), error)
        self._key = None
        self.close()

    def committed(self, seq: int) -> None:
        remove_through(self.directory, seq)

    def close(self) -> None:
        directory, self.directory, self.tasks_local = self.directory, None, False
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
