"""Ending the child processes a test starts, pipes included.

A killed child's ``stdout``/``stderr`` pipes stay open in the parent until
someone closes them; left to the garbage collector they close with a
ResourceWarning, at whatever later test happens to collect them. A child
nobody waited for lingers as a zombie (and ``subprocess`` warns about it).
:func:`reap` does both for every way a test ends a child.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["reap"]


def reap(proc: subprocess.Popen[Any], *, sig: int = signal.SIGKILL, timeout: float = 30.0,
         readers: Iterable[threading.Thread] = ()) -> int | None:
    """Send *sig* to *proc* if it still runs, wait for it, then close its pipes.

    *readers* are threads reading its pipes: they see end-of-file once it is gone
    and are joined before the pipes close (closing a pipe another thread is
    blocked reading would wait for that read). Returns the exit code (None if the
    child outlived *timeout*: then it is killed and waited for without a limit,
    which only a child stuck in the kernel could outlast).
    """
    code: int | None = None
    try:
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(timeout=timeout)
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass  # stdin's unflushed bytes had no reader left: nothing to release
    return code
