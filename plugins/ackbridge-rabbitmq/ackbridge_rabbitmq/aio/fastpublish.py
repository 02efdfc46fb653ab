"""The guard around the aio-pika transport's use of aiormq internals (its publish fast path).

aiormq's public ``Channel.basic_publish`` awaits the broker's confirm, so each
publish needs a task of its own, and hands each publish to the connection's
writer as a frame of its own, written with a socket send of its own: in
cProfile that send was most of a publish's cost, for raw aio-pika too. The fast
path (:func:`write_burst`) numbers a burst of publishes on the channel exactly
as ``basic_publish`` does (``delivery_tag``, ``confirmations``,
``message_id_delivery_tag``, so aiormq's own reader settles their futures on
Basic.Ack, Basic.Nack and Basic.Return) and hands the whole burst to the writer
as one ``ChannelFrame``: one write per burst, no task per publish. Each message
is encoded before it is numbered, so one that cannot be encoded is refused alone.

These names are aiormq's internals, written and tested for
:data:`AIORMQ_VERSION`. At import :func:`check` compares the installed aiormq's
version and looks for every name; if either fails, or ``ACKBRIDGE_AIORMQ_FAST_PATH=0``
is set (read when a publish channel opens), the transport uses aiormq's public
``basic_publish`` (tests/rabbitmq_aio/test_conformance_aio_pika_public_path.py
runs the conformance suite that way).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiormq.channel
from aiormq.abc import ChannelFrame
from pamqp.commands import Basic
from pamqp.frame import marshal
from pamqp.header import ContentHeader

from ackbridge.transport import fast_paths

log = logging.getLogger("ackbridge.rabbitmq")

#: The aiormq release the fast path was written and tested for.
AIORMQ_VERSION = "7.2.4"
#: Set to 0 (or false/no/off) to force aiormq's public basic_publish.
ENV = "ACKBRIDGE_AIORMQ_FAST_PATH"

#: Instance attributes of aiormq's Channel the fast path reads and writes (set in its __init__).
_ASSIGNED = ("confirmations", "message_id_delivery_tag", "delivery_tag", "write_queue", "number",
             "_Channel__lock")
#: Methods and properties of aiormq's Channel it calls or relies on its reader for.
_METHODS = ("_split_body", "create_future", "is_closed", "_on_return_frame", "_confirm_delivery")


@dataclass(frozen=True)
class Support:
    """Whether the installed aiormq can carry the fast path, and why not."""

    available: bool
    reason: str


def check(version: str | None = None) -> Support:
    """Check *version* (default: the installed aiormq's) and the internals the fast path uses."""
    found = importlib.metadata.version("aiormq") if version is None else version
    if found != AIORMQ_VERSION:
        return Support(False, f"aiormq {found} is installed; the fast path was written for aiormq {AIORMQ_VERSION}")
    channel = aiormq.channel.Channel
    for name in _METHODS:
        if not hasattr(channel, name):
            return Support(False, f"aiormq {found} has no Channel.{name}")
    assigned = set(channel.__init__.__code__.co_names)
    for name in _ASSIGNED:
        if name not in assigned:
            return Support(False, f"aiormq {found}'s Channel.__init__ no longer sets {name}")
    if {f.name for f in dataclasses.fields(ChannelFrame)} != {"payload", "should_close", "drain_future"}:
        return Support(False, f"aiormq {found}'s ChannelFrame has other fields")
    return Support(True, f"aiormq {found}")


#: Decided once, at import.
SUPPORT = check()
if not SUPPORT.available:
    log.warning("ackbridge-rabbitmq: the aio-pika transport uses aiormq's public basic_publish (slower): %s",
                SUPPORT.reason)


def forced_off() -> bool:
    """True when ``ACKBRIDGE_AIORMQ_FAST_PATH`` asks for the public path."""
    return fast_paths.forced_off(ENV)


def enabled() -> bool:
    """Use the fast path on a publish channel opening now?"""
    return SUPPORT.available and not forced_off()


#: One publish of a burst: (seq, exchange, routing key, properties, body).
Publish = tuple[int, str, str, Any, bytes]


def usable(wire: Any) -> bool:
    """Whether *wire* (an aiormq Channel) takes a burst now: open, and no public call
    holding its lock in the middle of numbering or writing."""
    # The asyncio.Lock behind its ``lock`` property (an async context manager), name-mangled.
    return not wire.is_closed and not wire._Channel__lock.locked()


def write_burst(wire: Any, burst: Sequence[Publish],
                numbered: Callable[[int, asyncio.Future[Any]], None],
                refused: Callable[[int, BaseException], None]) -> ChannelFrame | None:
    """Number each publish of *burst* on *wire* and return the one frame that carries
    them all (None if none could be encoded), for the caller to queue to the writer in
    order. *numbered(seq, future)* gets the confirm future of each numbered publish;
    *refused(seq, error)* each one that could not be encoded (not numbered). No await:
    nothing else runs on the channel between numbering and queueing."""
    number = wire.number
    split = wire._split_body
    payloads: list[bytes] = []
    for seq, exchange, key, props, body in burst:
        try:
            frames = [Basic.Publish(exchange=exchange, routing_key=key, mandatory=True),
                      ContentHeader(properties=props, body_size=len(body)), *split(body)]
            payload = b"".join(marshal(frame, number) for frame in frames)
        except Exception as exc:
            refused(seq, exc)
            continue
        wire.delivery_tag += 1
        tag = wire.delivery_tag
        confirmation: asyncio.Future[Any] = wire.create_future()
        wire.confirmations[tag] = confirmation
        message_id = props.message_id
        wire.message_id_delivery_tag[message_id] = tag
        confirmation.add_done_callback(_forget(wire, message_id, tag))
        payloads.append(payload)
        numbered(seq, confirmation)
    if not payloads:
        return None
    return ChannelFrame(payload=b"".join(payloads), should_close=False)


def _forget(wire: Any, message_id: str, tag: int) -> Callable[[asyncio.Future[Any]], None]:
    """What basic_publish does once a confirm is settled: drop the message_id -> tag entry."""
    def forget(_: asyncio.Future[Any]) -> None:
        if wire.message_id_delivery_tag.get(message_id) == tag:
            wire.message_id_delivery_tag.pop(message_id)
    return forget
