"""Names that go on the wire as stream-protocol strings: stream names, references, vhosts.

rstream 1.1.1 writes a string's length in *characters* while it writes its
bytes in UTF-8, so any non-ASCII name corrupts the frame (the broker then
drops or stalls the connection). Such names are refused here, before anything
is sent; the broker's own limit is 255 bytes.
"""

from __future__ import annotations

from ackbridge.errors import InvalidOptionError

MAX_NAME = 255


def name_ok(value: str) -> bool:
    return 0 < len(value) <= MAX_NAME and value.isascii()


def check_name(value: str, what: str) -> str:
    """*value* if the stream protocol (through rstream) can carry it, else InvalidOptionError."""
    if not isinstance(value, str) or not value:
        raise InvalidOptionError(f"{what} must be a non-empty string")
    if not value.isascii():
        raise InvalidOptionError(f"{what} {value!r} is not ASCII: rstream 1.1 writes string lengths in characters, "
                                 "so a non-ASCII name would corrupt the frame (refused before sending)")
    if len(value) > MAX_NAME:
        raise InvalidOptionError(f"{what} is {len(value)} characters long; RabbitMQ takes at most {MAX_NAME}")
    return value
