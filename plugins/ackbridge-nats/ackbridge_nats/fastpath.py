"""The guard around the transport's use of nats-py internals (the "fast path").

Two places go past nats-py's public API, each because the public path costs more
per message than the rest of the consume path together (issue 39, py-spy and
yappi on ``benchmarks/cpu_per_message.py --only nats``):

* :mod:`ackbridge_nats.dispatch`: a pull subscription's deliveries are handed to
  its handler as nats-py parses them (the subscription's ``_pending_queue`` is
  replaced), instead of through an ``asyncio.Queue``, a task and a coroutine per
  message; those without headers straight from the parser's call of the client's
  ``_process_msg`` (taken over per client), with no ``Msg`` built;
* :mod:`ackbridge_nats.wire`: a run of settlements (``+ACK``, ``-NAK``) is put in
  the client's output buffer (``_pending``) as PUB commands built at once, with
  one kick of its flusher, instead of one ``Client.publish`` per message.

Both were written and tested for :data:`NATS_VERSION`. At import this module
checks the installed nats-py's version and that every name they use is there
(:func:`check`). If either check fails, or ``ACKBRIDGE_NATS_FAST_PATH=0`` is set
(read when a transport is made), the transport uses ``Client.subscribe(cb=...)``
and ``Client.publish``: nats-py's public path, slower but not tied to one release.
The conformance suite runs with the fallback forced
(tests/nats/test_conformance_nats_public_path.py).
"""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser

from ackbridge.transport import fast_paths

log = logging.getLogger("ackbridge.nats")

#: The nats-py release the fast path was written and tested for.
NATS_VERSION = "2.15.0"
#: Set to 0 (or false/no/off) to force nats-py's public path.
ENV = "ACKBRIDGE_NATS_FAST_PATH"

#: Names a method's code must use, as (class, method, names).
_USED: tuple[tuple[type, str, tuple[str, ...]], ...] = (
    # Hands each parsed MSG of a subscription without a callback to put_nowait, and counts its bytes.
    (Client, "_process_msg", ("_subs", "_pending_queue", "put_nowait", "_pending_size")),
    (Subscription, "__init__", ("_pending_queue", "_pending_size")),
    # The parser hands each message's raw fields to the client's _process_msg (taken over).
    (Parser, "parse", ("_process_msg",)),
    # The output buffer wire.py appends to, and how a publish kicks the flusher.
    (Client, "_send_publish", ("stats", "_send_command", "_flush_queue", "_flush_pending")),
    (Client, "_send_command", ("_pending", "_pending_data_size", "_max_pending_size", "_flush_pending")),
    (Client, "__init__", ("_pending", "_pending_data_size", "_max_pending_size", "_flush_queue", "stats", "_subs")),
)
#: The arguments Parser.parse passes to Client._process_msg, in order.
_PROCESS_MSG_ARGS = ("self", "sid", "subject", "reply", "data", "headers")


@dataclass(frozen=True)
class Support:
    """Whether the installed nats-py can carry the fast path, and why not."""

    available: bool
    reason: str


def installed_version() -> str:
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check(version: str | None = None) -> Support:
    """Check *version* (default: the installed nats-py's) and the internals the fast path uses."""
    found = installed_version() if version is None else version
    if found != NATS_VERSION:
        return Support(False, f"nats-py {found} is installed; the fast path was written for nats-py {NATS_VERSION}")
    for owner, method, names in _USED:
        code = getattr(getattr(owner, method, None), "__code__", None)
        if code is None:
            return Support(False, f"nats-py {found} has no {owner.__name__}.{method}")
        used = set(code.co_names)
        for name in names:
            if name not in used:
                return Support(False, f"nats-py {found}'s {owner.__name__}.{method} no longer uses {name}")
    arguments = Client._process_msg.__code__.co_varnames[:len(_PROCESS_MSG_ARGS)]
    if arguments != _PROCESS_MSG_ARGS:
        return Support(False, f"nats-py {found}'s Client._process_msg takes {arguments}, not {_PROCESS_MSG_ARGS}")
    return Support(True, f"nats-py {found}")


#: Decided once, at import.
SUPPORT = check()
if not SUPPORT.available:
    log.warning("ackbridge-nats: using nats-py's public path (slower): %s", SUPPORT.reason)


def forced_off() -> bool:
    """True when ``ACKBRIDGE_NATS_FAST_PATH`` asks for nats-py's public path."""
    return fast_paths.forced_off(ENV)


def enabled() -> bool:
    """Use the fast path for a transport made now?"""
    return SUPPORT.available and not forced_off()
