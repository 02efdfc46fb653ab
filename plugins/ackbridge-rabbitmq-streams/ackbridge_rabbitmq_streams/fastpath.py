"""The guard around the plugin's hand-written AMQP 1.0 sections (the "fast path").

rstream's AMQP 1.0 encoder and decoder build a typed tree per field: on a
publish or a delivery they were most of the plugin's CPU. For the common
records (string ids or none, no headers) the codec writes and reads the
sections by hand (:mod:`~ackbridge_rabbitmq_streams.sections`), written and
tested byte for byte against the encoder of :data:`RSTREAM_VERSION`; and the
publisher sends its Publish frames with ``Client.send_publish_frame`` (rstream's
Producer's own way, a frame encoder of its own) rather than ``Client.publish``
(the generic frame encoder), which rstream does not document.

At import this module checks the installed rstream's version, that
``Client.send_publish_frame`` is there, and that rstream still writes the
hand-written bytes for a few sample messages, still reads them as the hand-written
reader does and still encodes a Publish frame the same both ways (:func:`check`). If any check fails, or
``ACKBRIDGE_RSTREAM_FAST_PATH=0`` is set (read when a transport or offset log
is created), the codec uses rstream's encoder and decoder and the publisher
``Client.publish``: the public path, slower but not tied to one release. The
conformance suite runs with the fallback forced
(tests/rabbitmq_streams/test_conformance_streams_public_path.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import rstream
from rstream import schema
from rstream.client import Client
from rstream.encoding import encode_frame, encode_publish

from ackbridge.messages import OutboundMessage
from ackbridge.transport import fast_paths
from ackbridge_rabbitmq_streams import codec

log = logging.getLogger("ackbridge.rabbitmq_streams")

#: The rstream release the fast path was written and tested for.
RSTREAM_VERSION = "1.1.1"
#: Set to 0 (or false/no/off) to force rstream's public path.
ENV = "ACKBRIDGE_RSTREAM_FAST_PATH"

#: Messages whose hand-written encoding must be rstream's, byte for byte (short and long
#: strings and bodies: list8 and list32, str8 and str32, vbin8 and vbin32).
SAMPLES: tuple[OutboundMessage, ...] = (
    OutboundMessage(b"body"),
    OutboundMessage(b""),
    OutboundMessage(b"x" * 300, message_id="m-1", correlation_id="c", reply_to="r", content_type="text/plain",
                    timestamp=1_700_000_000.123),
    OutboundMessage(b"y", message_id="\u00e9" * 200, content_type="a" * 300, timestamp=-1.0),
    OutboundMessage(b"z", headers={"n": 1, "b": b"\x00", "s": "t"}, message_id="h"),
)


def _reads_alike(data: bytes) -> bool:
    """Whether the hand-written reader tells what rstream's decoder tells about *data*."""
    try:
        fast = codec.decode(data, source="s", offset=0, wire_tag=0, generation=1, fast=True)
        slow = codec.through_rstream(data, source="s", wire_tag=0, generation=1)
    except Exception:
        return False
    return all(getattr(fast, name) == getattr(slow, name) for name in (
        "body", "headers", "message_id", "correlation_id", "reply_to", "content_type", "timestamp"))


@dataclass(frozen=True)
class Support:
    """Whether the installed rstream can carry the fast path, and why not."""

    available: bool
    reason: str


def check(version: str | None = None) -> Support:
    """Check *version* (default: the installed rstream's) and what the fast path relies on."""
    found = getattr(rstream, "__version__", "unknown") if version is None else version
    if found != RSTREAM_VERSION:
        return Support(False, f"rstream {found} is installed; the fast path was written for rstream "
                              f"{RSTREAM_VERSION}")
    if not callable(getattr(Client, "send_publish_frame", None)):
        return Support(False, f"rstream {found} has no Client.send_publish_frame")
    for number, sample in enumerate(SAMPLES):
        try:
            same = codec.encode(sample, fast=True) == codec.encode_public(sample)
        except Exception as exc:  # a changed rstream that fails on the samples
            return Support(False, f"rstream {found} fails on sample message {number}: {type(exc).__name__}")
        if not same:
            return Support(False, f"rstream {found} encodes sample message {number} otherwise than the "
                                  "hand-written sections")
        if not _reads_alike(codec.encode_public(sample)):
            return Support(False, f"rstream {found} decodes sample message {number} otherwise than the "
                                  "hand-written reader")
    frame = schema.Publish(publisher_id=3, messages=[
        schema.Message(publishing_id=i, filter_value=None, data=codec.encode_public(s))
        for i, s in enumerate(SAMPLES)])
    try:
        same = encode_publish(frame) == encode_frame(frame)
    except Exception as exc:
        return Support(False, f"rstream {found} fails to encode a Publish frame: {type(exc).__name__}")
    if not same:
        return Support(False, f"rstream {found} encodes a Publish frame in two ways")
    return Support(True, f"rstream {found}")


#: Decided once, at import.
SUPPORT = check()
if not SUPPORT.available:
    log.warning("ackbridge-rabbitmq-streams: using rstream's public path (slower): %s", SUPPORT.reason)


def forced_off() -> bool:
    """True when ``ACKBRIDGE_RSTREAM_FAST_PATH`` asks for rstream's public path."""
    return fast_paths.forced_off(ENV)


def enabled() -> bool:
    """Use the fast path for a transport (or offset log) created now?"""
    return SUPPORT.available and not forced_off()
