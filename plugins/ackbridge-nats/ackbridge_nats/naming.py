"""How ackbridge names map to JetStream names.

* a queue is a subject (``orders``, ``shop.orders``) with no wildcard;
* its stream is named after the subject: every character a stream name may
  not hold (``.``, ``*``, ``>``, whitespace, path separators ...) becomes
  ``_``, and when one was replaced a short hash of the subject is appended,
  so ``shop.orders`` and ``shop_orders`` never share a stream
  (``shop_orders-1a2b3c4d`` and ``shop_orders``);
* the durable pull consumer every ackbridge consumer of the queue shares is
  named by the ``durable`` option (``ackbridge``);
* a queue's dead-letter subject is ``dead_letter_subject`` with ``{queue}``
  replaced (``orders.dlq``), stored in a stream named the same way.
"""

from __future__ import annotations

import hashlib
import re

from ackbridge.errors import InvalidOptionError

DEFAULT_DURABLE = "ackbridge"
DEFAULT_DEAD_LETTER_SUBJECT = "{queue}.dlq"
#: Stream and consumer names: what nats-server accepts without surprises.
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]+$")
_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
#: nats-server refuses longer stream names.
MAX_NAME = 255


def check_subject(subject: str, what: str = "subject") -> str:
    """Refuse a subject JetStream would refuse or read as a wildcard (before anything is sent)."""
    if not isinstance(subject, str) or not subject:
        raise InvalidOptionError(f"a NATS {what} must be a non-empty string")
    if any(ch.isspace() or ord(ch) < 0x20 or ch == "\x7f" for ch in subject):
        raise InvalidOptionError(f"NATS {what} {subject!r} contains whitespace or a control character")
    tokens = subject.split(".")
    if any(not token for token in tokens):
        raise InvalidOptionError(f"NATS {what} {subject!r} has an empty token (leading, trailing or double '.')")
    if any(token in ("*", ">") for token in tokens):
        raise InvalidOptionError(f"NATS {what} {subject!r} is a wildcard; name one subject")
    return subject


def stream_name(subject: str) -> str:
    """The stream that stores *subject* (see the module docstring)."""
    check_subject(subject, "queue")
    name = _NAME_BAD.sub("_", subject)
    if name != subject:
        name = f"{name[:MAX_NAME - 9]}-{hashlib.sha1(subject.encode()).hexdigest()[:8]}"
    return name


def check_durable(name: str) -> bool:
    return bool(_NAME_OK.match(name)) and len(name) <= MAX_NAME


def dead_letter_subject(template: str, queue: str) -> str:
    return template.replace("{queue}", queue)
