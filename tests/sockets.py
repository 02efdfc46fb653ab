"""What a test of closed sockets reads: the sockets this process holds open."""

from __future__ import annotations

import os


def open_sockets() -> int:
    """Sockets this process holds open (file descriptors that are sockets)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count
