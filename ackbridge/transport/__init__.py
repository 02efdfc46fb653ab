"""What a plugin implements and may use.

The contracts (:class:`SyncTransport`, :class:`AsyncTransport`,
:class:`TransportEvents`) and the thread adapter live in
:mod:`ackbridge.transport.base` and are re-exported here; the helpers are
submodules: ``loop_thread``, ``held_work``, ``offset_log``, ``tls``, ``text``,
``header_text``, ``files``. Imports only the public top-level modules of
:mod:`ackbridge`.

Names load on first use (PEP 562): a Spark worker that needs only
``ackbridge.transport.files`` or ``offset_log`` skips asyncio and the contracts.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ackbridge.transport.base import (
        SYNC_METHODS,
        AsyncTransport,
        ForwardedFaults,
        SyncTransport,
        ThreadedAsyncTransport,
        TransportBase,
        TransportEvents,
    )

__all__ = [
    "SYNC_METHODS",
    "AsyncTransport",
    "ForwardedFaults",
    "SyncTransport",
    "ThreadedAsyncTransport",
    "TransportBase",
    "TransportEvents",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("ackbridge.transport.base"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
