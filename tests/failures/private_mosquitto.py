"""A Mosquitto of the test's own (its port, config and store), started and SIGKILLed by the test.

Used where the shared broker on 1883 cannot serve: a password file, a size
limit, persistence with a chosen autosave, or a kill and restart.
"""

from __future__ import annotations

import os
import subprocess

from tests.failures.private_server import PrivateServer, free_port

__all__ = ["PrivateMosquitto", "free_port"]


class PrivateMosquitto(PrivateServer):
    """``with PrivateMosquitto(...) as broker:``; ``kill()`` then ``start()`` restarts it on the same store."""

    program, config, scheme = "mosquitto", "mosquitto.conf", "mqtt"

    def __init__(self, *, users: dict[str, str] | None = None, extra: str = "", persistence: bool = False) -> None:
        super().__init__("ab-mosq-")
        os.chmod(self.dir, 0o777)  # mosquitto may drop to its own user and must write its store here
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
        (self.dir / self.config).write_text("\n".join(lines) + "\n" + extra)
