"""The ``ackbridge.*`` logger tree, and the client libraries' noise kept below INFO.

Loggers: ``ackbridge`` (core) and one ``ackbridge.<plugin>`` per plugin (each plugin's
README names its own), ``ackbridge.spark``. ``logging.getLogger("ackbridge").setLevel(...)``
governs all.

Client libraries log every connect and reconnect at INFO. Each plugin declares the
top-level logger names of the libraries it drives (``AdapterSpec.client_loggers``);
the first connection through that plugin sets each of those loggers to WARNING --
only a logger the application has not configured (level NOTSET, no handler but
the library's own NullHandler); nothing process-wide (no root logger, no
``logging.disable``, no patching). To see their INFO lines, set their level before
connecting, e.g. ``logging.getLogger(name).setLevel(logging.INFO)`` for a name the plugin declared.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

#: Client logger names already looked at: each is decided once per process, so a level
#: the application sets after the first connection is never overridden.
_looked_at: set[str] = set()
_lock = threading.Lock()


def quiet_client_libraries(names: Iterable[str], level: int = logging.WARNING) -> list[str]:
    """Set each of *names* (client library loggers) the application left alone to
    *level*; the names changed. Each name is decided once per process."""
    changed = []
    with _lock:
        for name in names:
            if name in _looked_at:
                continue
            _looked_at.add(name)
            logger = logging.getLogger(name)
            # A library's own NullHandler does not count as the application configuring it.
            if logger.level == logging.NOTSET and all(type(h) is logging.NullHandler for h in logger.handlers):
                logger.setLevel(level)
                changed.append(name)
    return changed


def delivery_fields(broker: str, source: str, generation: int) -> dict[str, Any]:
    """``extra=`` of a warning about a delivery: grep-able and on the record
    (``record.ackbridge_broker`` ...), never a URL or credential."""
    return {"ackbridge_broker": broker, "ackbridge_destination": source, "ackbridge_generation": generation}
