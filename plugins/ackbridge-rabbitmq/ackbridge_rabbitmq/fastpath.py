"""The guard around the transport's use of pika internals (the "fast path").

``coalescing.py`` (one socket write per batch of publishes, frames built by
``frames.py``) and ``deliveries.py`` (whole small deliveries decoded past pika's
generic frame dispatch) subclass pika's ``SelectConnection`` and use names pika
does not promise to keep: ``_on_data_available``, ``_process_frame``,
``_output_marshaled_frames``, ``Channel._on_deliver``, the content assembler's
fields and so on. They were written and tested (byte for byte, against pika's
own path) for :data:`PIKA_VERSION`.

At import this module checks the installed pika's version and that every
method and attribute the fast path needs is there (:func:`check`). If either
check fails, or ``ACKBRIDGE_PIKA_FAST_PATH=0`` is set (read when a connection
opens), the transport uses plain ``pika.SelectConnection`` and
``Channel.basic_publish``: pika's public path, slower but not tied to one
release. The conformance suite runs with the fallback forced
(tests/rabbitmq/test_conformance_rabbitmq_public_path.py).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

import pika

from ackbridge.transport import fast_paths

log = logging.getLogger("ackbridge.rabbitmq")

#: The pika release the fast path was written and tested for.
PIKA_VERSION = "1.4.4"
#: Set to 0 (or false/no/off) to force pika's public path.
ENV = "ACKBRIDGE_PIKA_FAST_PATH"

_CONNECTION = "pika.connection.Connection"
_BASE = "pika.adapters.base_connection.BaseConnection"
_CHANNEL = "pika.channel.Channel"
_ASSEMBLER = "pika.channel.ContentFrameAssembler"

#: Methods and class attributes the fast path uses, as "module.Class", name.
_METHODS: tuple[tuple[str, str], ...] = (
    (_CONNECTION, "_on_data_available"),
    (_CONNECTION, "_process_frame"),
    (_CONNECTION, "_output_marshaled_frames"),
    (_BASE, "_adapter_emit_data"),
    (_BASE, "_proto_connection_made"),
    (_CHANNEL, "_on_deliver"),
    ("pika.adapters.utils.io_services_utils._AsyncTransportBase", "_MAX_RECV_BYTES"),
)

#: Instance attributes the fast path reads, and the method whose code assigns them
#: (checked in its byte code: nothing is instantiated at import).
_ASSIGNED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_CONNECTION, "_init_connection_state", ("_frame_buffer", "_channels", "bytes_received", "frames_received")),
    (_CONNECTION, "_on_connection_tune", ("_body_max_length",)),
    (_BASE, "_init_connection_state", ("_transport",)),
    (_CHANNEL, "__init__", ("_content_assembler", "_consumers")),
    (_ASSEMBLER, "_reset", ("_method_frame", "_header_frame", "_body_fragments")),
)


def _find(dotted: str) -> Any:
    """The class named "package.module.Class", or None."""
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


@dataclass(frozen=True)
class Support:
    """Whether the installed pika can carry the fast path, and why not."""

    available: bool
    reason: str


def check(version: str | None = None) -> Support:
    """Check *version* (default: the installed pika's) and the internals the fast path uses."""
    found = pika.__version__ if version is None else version
    if found != PIKA_VERSION:
        return Support(False, f"pika {found} is installed; the fast path was written for pika {PIKA_VERSION}")
    for owner, name in _METHODS:
        if not hasattr(_find(owner), name):
            return Support(False, f"pika {found} has no {owner}.{name}")
    for owner, method, names in _ASSIGNED:
        code = getattr(getattr(_find(owner), method, None), "__code__", None)
        assigned = set(code.co_names) if code is not None else set()
        for name in names:
            if name not in assigned:
                return Support(False, f"pika {found}'s {owner}.{method} no longer sets {name}")
    return Support(True, f"pika {found}")


#: Decided once, at import.
SUPPORT = check()
if not SUPPORT.available:
    log.warning("ackbridge-rabbitmq: using pika's public path (slower): %s", SUPPORT.reason)


def forced_off() -> bool:
    """True when ``ACKBRIDGE_PIKA_FAST_PATH`` asks for pika's public path."""
    return fast_paths.forced_off(ENV)


def enabled() -> bool:
    """Use the fast path for a connection opening now?"""
    return SUPPORT.available and not forced_off()
