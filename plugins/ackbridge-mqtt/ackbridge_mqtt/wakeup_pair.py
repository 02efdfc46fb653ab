"""Closing paho's wake-up socket pair when a link stops.

paho-mqtt 2.x (seen on 2.2.0) makes a loopback TCP socket pair in
``loop_start()`` (it wakes the network thread's ``select``) and closes it only
in ``Client.__del__``. A stopped client sits in a reference cycle (its
callbacks are the link's bound methods), so it is freed by the garbage
collector, which may finalise the two sockets before the client: two file
descriptors held until then, and a ``ResourceWarning`` for each. ``loop_stop``
and ``disconnect`` leave the pair open.

So a stopped link closes the pair itself, through ``Client._reset_sockets``
(private: ``sockpair_only=True`` leaves the MQTT socket to paho). Where that
method is gone (a paho this was not written for), the pair is left to paho's
own ``__del__``, as before.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("ackbridge.mqtt")


def close_wakeup_pair(client: Any) -> None:
    """Close *client*'s wake-up pair (call after ``loop_stop``: its thread is gone)."""
    reset = getattr(client, "_reset_sockets", None)
    if reset is None:
        log.debug("ackbridge-mqtt: this paho has no Client._reset_sockets; its wake-up pair closes when it is freed")
        return
    reset(sockpair_only=True)
