"""BrokerHarness for the example third-party plugin (``memory://``), answering from the broker's side.

The memory broker lives in the test process: its queues are the module's ``_QUEUES``
(under ``_LOCK``) and the deliveries it handed out and not yet settled are each
connection's in-flight table (``MemoryTransport._in_flight``), the broker's "unacked".
The harness reads those objects directly, never what the client believes; the plugin
itself is used unchanged (nothing is patched or subclassed).

``ackbridge_memory`` is imported lazily: it is importable only once the package's
conftest has installed the example and put it on ``sys.path``.
"""

from __future__ import annotations

import gc
import importlib
import uuid
from collections import deque
from typing import Any

from ackbridge.testing import BrokerHarness
from ackbridge.testing.faults import faults


def _plugin() -> Any:
    """The installed ``ackbridge_memory`` module (the one the registry loaded)."""
    return importlib.import_module("ackbridge_memory")


class MemoryHarness(BrokerHarness):
    name = "memory"
    #: Counted from every live MemoryTransport's in-flight table (the broker's unacked).
    can_count_unacked = True
    #: The memory broker confirms inside publish(): there is nothing to hold, and the
    #: plugin offers neither hold_writes nor hold_publishes on its fault seam.
    can_hold_confirms = False

    def __init__(self) -> None:
        self._queues: list[str] = []

    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return "memory://conformance" + (f"?{query}" if query else "")

    def new_queue(self, *, dead_letter: bool = True) -> str:
        # dead_letter is ignored: the broker has no dead-letter queue (declared: reject unsupported).
        plugin = _plugin()
        name = f"q-{uuid.uuid4().hex[:10]}"
        with plugin._LOCK:
            plugin._QUEUES.setdefault(name, deque())
        self._queues.append(name)
        return name

    def ready(self, queue: str) -> int:
        plugin = _plugin()
        with plugin._LOCK:
            return len(plugin._QUEUES.get(queue, ()))

    def unacked(self, queue: str) -> int:
        plugin = _plugin()
        transports = [o for o in gc.get_objects() if isinstance(o, plugin.MemoryTransport)]
        with plugin._LOCK:
            return sum(1 for t in transports for source, _ in list(t._in_flight.values()) if source == queue)

    def dead_lettered(self, queue: str) -> list[bytes]:
        return []  # no dead-letter target exists on this broker: nothing is ever dead-lettered

    def break_connection(self, connection: Any) -> None:
        # The plugin's one fault: deliveries return to their queues and the generation ends.
        faults(connection).sever("test cut the connection")

    def cleanup(self) -> None:
        plugin = _plugin()
        with plugin._LOCK:
            for name in self._queues:
                plugin._QUEUES.pop(name, None)
        self._queues.clear()
