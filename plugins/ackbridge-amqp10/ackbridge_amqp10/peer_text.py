"""Text from the peer, read without proton's strict UTF-8 decoding.

proton's binding decodes every C string and every AMQP string strictly as
UTF-8 and raises ``UnicodeDecodeError`` where it reads one. Peers do send
other bytes: RabbitMQ 3.10 writes a non-ASCII queue name into its
``not-found`` description as Latin-1 and cuts long descriptions at a byte
limit, sometimes inside a character; any peer can put such bytes into a
message's string fields. Read through proton's Python layer, that stops the
very handler that should report the error, on every read.

So ackbridge reads what the peer sends through the C binding itself and
decodes it here: UTF-8 where it is valid, Latin-1 (which takes any bytes and
keeps each one: ``text.encode("latin-1")`` gives them back) where it is not.
Nothing in proton is replaced: other users of proton in the same process
keep its behaviour.
"""

from __future__ import annotations

from typing import Any

import cproton  # type: ignore[import-untyped]  # proton's C binding ships no types
from proton import Condition, Connection, Data, Disposition, Link, Session, Transport, symbol

_ffi = cproton.ffi
_lib = cproton.lib
_NULL = _ffi.NULL


def peer_text(raw: bytes) -> str:
    """*raw* as text: UTF-8 when it is valid, otherwise Latin-1 (lossless)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def c_text(pointer: Any) -> str | None:
    """A NUL-terminated C string from proton, or None for NULL."""
    return None if pointer == _NULL else peer_text(_ffi.string(pointer))


def bytes_text(value: Any) -> str:
    """A ``pn_bytes_t`` (an AMQP string or symbol) as text."""
    return peer_text(_ffi.unpack(value.start, value.size))


class TolerantData(Data):
    """proton's :class:`~proton.Data` reader, with strings and symbols decoded by
    :func:`peer_text` (proton's own mapping raises on bytes that are not UTF-8,
    or not ASCII for a symbol). Every other type reads as proton reads it."""

    def __init__(self, impl: Any) -> None:
        super().__init__(impl)
        self.impl = impl


def _string(data: Data) -> str:
    assert isinstance(data, TolerantData)
    return bytes_text(_lib.pn_data_get_string(data.impl))


def _symbol(data: Data) -> symbol:
    assert isinstance(data, TolerantData)
    return symbol(bytes_text(_lib.pn_data_get_symbol(data.impl)))


TolerantData.get_mappings = {**Data.get_mappings, Data.STRING: _string, Data.SYMBOL: _symbol}


def read_data(impl: Any) -> Any:
    """The first value of a ``pn_data_t`` as a Python object (None when empty)."""
    data = TolerantData(impl)
    data.rewind()
    return data.get_object() if data.next() else None


def read_body(impl: Any) -> Any:
    """A message body section (``pn_data_t``) as :func:`read_data` reads it, except
    that a string body (amqp-value) is returned as the bytes the peer sent: when
    they are not UTF-8, no text decoding of them is the faithful one."""
    data = TolerantData(impl)
    data.rewind()
    if not data.next():
        return None
    if data.type() == Data.STRING:
        found = _lib.pn_data_get_string(impl)
        return bytes(_ffi.unpack(found.start, found.size))
    return data.get_object()


def _condition(cond: Any) -> Condition | None:
    if cond == _NULL or not _lib.pn_condition_is_set(cond):
        return None
    info = _lib.pn_condition_info(cond)
    return Condition(c_text(_lib.pn_condition_get_name(cond)) or "",
                     c_text(_lib.pn_condition_get_description(cond)),
                     read_data(info) if info != _NULL else None)


_REMOTE = ((Link, _lib.pn_link_remote_condition), (Session, _lib.pn_session_remote_condition),
           (Connection, _lib.pn_connection_remote_condition))

UNDECODABLE = "ackbridge:undecodable-condition"


def _strict(read: Any) -> Condition | None:
    # Without the C object (a proton release that no longer keeps it as ``_impl``)
    # the condition is read through proton; its text may then be lost, the error not.
    try:
        found: Condition | None = read()
        return found
    except UnicodeDecodeError:
        return Condition(UNDECODABLE, "the peer's error condition is not valid UTF-8")


def remote_condition(endpoint: Any) -> Condition | None:
    """``endpoint.remote_condition`` of a Link, Session or Connection, read tolerantly."""
    impl = getattr(endpoint, "_impl", None)
    for kind, reader in _REMOTE:
        if impl is not None and isinstance(endpoint, kind):
            return _condition(reader(impl))
    return _strict(lambda: endpoint.remote_condition)


def transport_condition(transport: Any) -> Condition | None:
    """``transport.condition``, read tolerantly."""
    impl = getattr(transport, "_impl", None)
    if impl is not None and isinstance(transport, Transport):
        return _condition(_lib.pn_transport_condition(impl))
    return _strict(lambda: transport.condition)


def disposition_condition(disposition: Any) -> Condition | None:
    """``delivery.remote.condition`` (a rejected outcome's reason), read tolerantly."""
    impl = getattr(disposition, "_impl", None)
    if impl is not None and isinstance(disposition, Disposition):
        return _condition(_lib.pn_disposition_condition(impl))
    return _strict(lambda: disposition.condition)


__all__ = ["TolerantData", "bytes_text", "c_text", "disposition_condition", "peer_text", "read_body", "read_data",
           "remote_condition", "transport_condition"]
