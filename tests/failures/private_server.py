"""A broker process of the test's own: its port, config and store in a private
directory, started, SIGKILLed and started again by the test."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from ackbridge.transport.files import process_alive


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: Ports held by this machine's private servers, a file per port naming the holder's pid.
RESERVATIONS = Path(tempfile.gettempdir()) / "ackbridge-test-ports"


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def reserve_port() -> int:
    """A port for a server that is killed and started again on it, held until release_port().

    A port from bind(0) is free only now: while its server is down for a restart, another
    test (any xdist worker) could take it, from its own bind(0) or as the local port of an
    outgoing connection, and the restarted server would fail to listen while the test talked
    to whatever held it. So the port comes from
    below the kernel's ephemeral range, which neither of those ever hands out, and a file in
    RESERVATIONS keeps other private servers off it; a file whose pid is dead is taken over."""
    RESERVATIONS.mkdir(exist_ok=True)
    low, high = 20000, _ephemeral_start() - 1
    for _ in range(1000):
        port = random.randint(low, high)
        marker = RESERVATIONS / str(port)
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with contextlib.suppress(OSError):
                holder = marker.read_text()  # empty: made a moment ago, its pid not written yet
                if holder.isdigit() and not process_alive(int(holder)):
                    marker.unlink()  # its holder died without releasing the port: free again next draw
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                marker.unlink()  # in use by something else
                continue
        return port
    raise RuntimeError(f"no free port in {low}-{high} to reserve")


def release_port(port: int) -> None:
    with contextlib.suppress(OSError):
        (RESERVATIONS / str(port)).unlink()


class PrivateServer:
    """``with Server(...) as server:``; ``kill()`` then ``start()`` restarts it on the same store.

    A subclass writes ``self.dir / self.config`` and names its ``program`` and URL ``scheme``.
    """

    program = ""
    config = ""
    scheme = ""
    #: Seconds to wait for the port to answer.
    start_timeout = 10.0

    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.port = reserve_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The server's log goes to a file, never a pipe nobody reads (a full pipe would
        # stall the server); a start that fails shows its tail.
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([self.program, "-c", str(self.dir / self.config)],
                                         stdout=subprocess.DEVNULL, stderr=log)
        end = time.monotonic() + self.start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise AssertionError(f"private {self.program} did not start: {self.log_tail()!r}") from None
                time.sleep(0.05)

    @property
    def log(self) -> Path:
        return self.dir / f"{self.program}.log"

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log (every start appends to it)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no goodbye, no final save of the store."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def url(self, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"{self.scheme}://{auth}127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        release_port(self.port)
        shutil.rmtree(self.dir, ignore_errors=True)
