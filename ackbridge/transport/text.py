"""Checks of text that brokers refuse by ending the connection, shared by plugins.

MQTT 5 forbids U+0000 and lets a server refuse control characters and
non-characters (section 1.5.4), and Mosquitto 2.0 does so by dropping the
connection; RabbitMQ 3.10's AMQP 1.0 plugin ends the connection with a
framing-error on the same characters in an address. A plugin checks names and
strings with :func:`forbidden_character` before anything reaches the wire.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_CONTROL_OR_NONCHARACTER = re.compile("[\x00-\x1f\x7f-\x9f\ufdd0-\ufdef\ufffe\uffff\ud800-\udfff]")


def forbidden_character(text: str) -> str | None:
    """The first control character, non-character or lone surrogate in *text*, or None."""
    found = _CONTROL_OR_NONCHARACTER.search(text)
    if found is not None:
        return found.group()
    # Non-characters of the supplementary planes: U+1FFFE, U+1FFFF, ... U+10FFFF.
    return next((ch for ch in text if ord(ch) > 0xFFFF and (ord(ch) & 0xFFFE) == 0xFFFE), None)


class CheckedOnce:
    """Runs *check* on each name once, then remembers it passed: a publish hot path
    checks its destination on the first message, not on every one."""

    def __init__(self, check: Callable[[str], object], limit: int = 4096) -> None:
        self._check = check
        self._limit = limit
        self._passed: set[str] = set()

    def __call__(self, name: str) -> None:
        """Raise what *check* raises for a bad name; return quietly for a good one."""
        if name in self._passed:
            return
        self._check(name)
        if len(self._passed) >= self._limit:
            self._passed.clear()  # bounded: a stream of distinct names re-checks, never grows
        self._passed.add(name)
