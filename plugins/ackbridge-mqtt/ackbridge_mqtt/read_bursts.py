"""Confirms handed to the core once per socket read of paho's network thread (the "fast path").

Why: paho calls ``on_publish`` once per PUBACK, and the link reported each
confirm at once. On the asyncio face every confirm then woke the event loop
(a self-pipe write, an epoll wake-up and the GIL passed between paho's thread
and the loop): ``strace -c -f`` counted 3.6 epoll_wait and 7.9 futex calls
per publish, against none of either on the sync face. Held until paho has read
what the socket had, the confirms go to the core as one ``confirm_batch``: one
wake-up for the burst.

How: :class:`ReadBurstClient` is ``paho.Client`` with ``loop_read`` (public)
calling the link's hand-over after paho's own. That paho's network loop
(``Client._loop``, private) calls ``loop_read`` once per ``select`` is what
paho 2.2 does, not what it promises: :func:`check` tests the version and that
``_loop`` still calls ``loop_read``. If either check fails,
or ``ACKBRIDGE_PAHO_FAST_PATH=0`` is set (read when a link is made), links use
plain ``paho.Client`` and report each confirm at once (the public path).
Either way a link's end (``Link._end``) hands over what is held before it
reports the publishes it lost, so nothing held is ever left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho import mqtt as paho_mqtt
from paho.mqtt.enums import MQTTErrorCode

from ackbridge.transport import fast_paths

log = logging.getLogger("ackbridge.mqtt")

#: The paho-mqtt release the fast path was written and tested for.
PAHO_VERSION = "2.2.0"
#: Set to 0 (or false/no/off) to force the public path.
ENV = "ACKBRIDGE_PAHO_FAST_PATH"


@dataclass(frozen=True)
class Support:
    """Whether the installed paho can carry the fast path, and why not."""

    available: bool
    reason: str


def check(version: str | None = None) -> Support:
    """Check *version* (default: the installed paho's) and that its network loop reads
    through ``loop_read``."""
    found = paho_mqtt.__version__ if version is None else version
    if found != PAHO_VERSION:
        return Support(False, f"paho-mqtt {found} is installed; the fast path was written for {PAHO_VERSION}")
    code = getattr(getattr(paho.Client, "_loop", None), "__code__", None)
    names = set(code.co_names) if code is not None else set()
    if "loop_read" not in names:
        return Support(False, f"paho-mqtt {found}'s Client._loop no longer calls loop_read")
    return Support(True, f"paho-mqtt {found}")


#: Decided once, at import.
SUPPORT = check()
if not SUPPORT.available:
    log.warning("ackbridge-mqtt: confirms are reported one by one (slower): %s", SUPPORT.reason)


def forced_off() -> bool:
    """True when ``ACKBRIDGE_PAHO_FAST_PATH`` asks for the public path."""
    return fast_paths.forced_off(ENV)


def enabled() -> bool:
    """Use the fast path for a link made now?"""
    return SUPPORT.available and not forced_off()


def _nothing() -> None:
    pass


class ReadBurstClient(paho.Client):
    """``paho.Client`` that calls :attr:`after_read` each time its network loop has read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Set by the link: hands over what on_publish held during the read.
        self.after_read: Callable[[], None] = _nothing

    def loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        try:
            return super().loop_read(max_packets)
        finally:
            self.after_read()
