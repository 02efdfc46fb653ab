"""Running tests/pipeline/failing_app.py as a child process, and killing it: the parent's
side of the SIGKILL tests (tests/pipeline/test_killed_consumer.py,
tests/scoreboard/test_held_retry_rows.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).with_name("failing_app.py")
ROOT = Path(__file__).resolve().parents[2]


def start(url: str, queue: str, delay: float) -> subprocess.Popen[str]:
    """The child consuming *queue*, once it says it is ready."""
    child = subprocess.Popen([sys.executable, str(APP), url, queue, str(delay)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def said(child: subprocess.Popen[str]) -> str:
    """The child's next line."""
    assert child.stdout is not None
    return child.stdout.readline().strip()


def kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL it; it must not have written anything more (no attempt ran after its last line)."""
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    assert child.stdout is not None
    assert child.stdout.read() == "", "the child ran attempt 2 before it was killed"
    child.stdout.close()
    if child.stdin is not None:
        child.stdin.close()
