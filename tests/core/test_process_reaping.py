"""ackbridge.testing.processes.reap: a killed child is waited for and its pipes are closed."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from ackbridge.testing.harness import eventually
from ackbridge.testing.processes import reap

# Prints a line, then waits on stdin for ever: only a signal ends it.
CHILD = "import sys; print('up', flush=True); sys.stdin.read()"


def _child() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_killed_child_is_waited_for_and_its_pipes_closed() -> None:
    proc = _child()
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    code = reap(proc)
    assert code == -signal.SIGKILL and proc.returncode == -signal.SIGKILL
    assert proc.stdin is not None and proc.stderr is not None
    assert [proc.stdin.closed, proc.stdout.closed, proc.stderr.closed] == [True, True, True]


def test_readers_are_joined_before_the_pipe_closes() -> None:
    proc = _child()
    lines: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: lines.extend(stdout), daemon=True)
    reader.start()
    eventually(lambda: lines == ["up\n"], timeout=60, message="the child's first line read")
    reap(proc, sig=signal.SIGTERM, readers=[reader])
    assert not reader.is_alive()
    assert proc.returncode == -signal.SIGTERM and stdout.closed


def test_a_child_that_already_exited_is_only_cleaned_up() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "print('done')"], stdout=subprocess.PIPE, text=True)
    assert proc.wait(timeout=60) == 0
    assert reap(proc) == 0  # no signal sent to a pid that may have been reused
    assert proc.stdout is not None and proc.stdout.closed
