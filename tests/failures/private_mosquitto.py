"""A Mosquitto of the test's own (its port, config and store), started and SIGKILLed by the test.

Used where the shared broker on 1883 cannot serve: a password file, a size
limit, persistence with a chosen autosave, or a kill and restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateMosquitto:
    """``with PrivateMosquitto(...) as broker:``; ``kill()`` then ``start()`` restarts it on the same store."""

    def __init__(self, *, users: dict[str, str] | None = None, extra: str = "", persistence: bool = False) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ab-mosq-"))
        os.chmod(self.dir, 0o777)  # mosquitto may drop to its own user and must write its store here
        self.port = free_port()
        lines = [f"listener {self.port} 127.0.0.1"]
        if users:
            passwd = self.dir / "passwd"
            passwd.write_text("")
            for user, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, password], check=True,
                               capture_output=True)
            passwd.chmod(0o644)
            lines += ["allow_anonymous false", f"password_file {passwd}"]
        else:
            lines.append("allow_anonymous true")
        if persistence:
            lines += ["persistence true", f"persistence_location {self.dir}/"]
        else:
            lines.append("persistence false")
        (self.dir / "mosquitto.conf").write_text("\n".join(lines) + "\n" + extra)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["mosquitto", "-c", str(self.dir / "mosquitto.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else b""
                    raise AssertionError(f"private mosquitto did not start: {err!r}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no goodbye, no final save of the store."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def url(self, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"mqtt://{auth}127.0.0.1:{self.port}"

    def __enter__(self) -> PrivateMosquitto:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
