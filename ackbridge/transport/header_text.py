"""Header values as text plus a type tag, for protocols whose headers carry only
strings (MQTT 5 user properties, NATS headers). A plugin sends the tags beside
the values (one bookkeeping header) and reads the values back with their type."""

from __future__ import annotations

import base64
from typing import Any

from ackbridge.errors import InvalidOptionError


def to_text(value: Any, what: str = "header value") -> tuple[str, str | None]:
    """(text, type tag); the tag is None for a plain string. *what* names the value in errors."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, bool):
        return ("true" if value else "false"), "bool"
    if isinstance(value, int):
        return str(value), "int"
    if isinstance(value, float):
        return repr(value), "float"  # float() reads back inf and nan too
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii"), "bytes"
    if value is None:
        return "", "null"
    raise InvalidOptionError(f"{what} of type {type(value).__name__} cannot be sent as text")


def from_text(text: str, tag: str | None) -> Any:
    """The value :func:`to_text` made *text* from; the text itself when the tag is
    unknown or the text does not parse (a header another producer wrote)."""
    try:
        if tag == "bool":
            return text == "true"
        if tag == "int":
            return int(text)
        if tag == "float":
            return float(text)
        if tag == "bytes":
            return base64.b64decode(text, validate=True)
        if tag == "null":
            return None
    except ValueError:
        pass
    return text
