"""A pika SelectConnection that writes a batch of publishes to the socket at once.

pika hands every frame to its transport separately and the transport sends each
buffered chunk with its own ``send()``: a publish (method, header and body
frames) costs three system calls, and on loopback each one also wakes the broker.
That was the largest single cost of publishing, raw pika included. Inside
:meth:`CoalescingConnection.coalesce` the frames are gathered and written as one
chunk per ``COALESCE_BYTES``; order is kept because only the I/O thread writes
and it emits everything gathered before it leaves the block.

``_adapter_emit_data`` is the hook pika's connection calls on its adapter (the
subclass interface of ``pika.connection.Connection``); ``fastpath.py`` checks
it is there before this class is used, and a test checks that a batch really
goes out as one write.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pika

#: Largest chunk handed to the transport at once: big enough to cut the system
#: calls of a window of publishes to a handful, small enough that a partial send
#: (pika copies the unsent rest) stays cheap.
COALESCE_BYTES = 128 * 1024


class CoalescingConnection(pika.SelectConnection):  # type: ignore[misc]  # pika ships no types
    _gathered: list[bytes] | None = None
    _gathered_bytes = 0
    #: Chunks handed to the transport (for tests).
    writes = 0

    @contextmanager
    def coalesce(self) -> Iterator[None]:
        """Gather the frames written in this block; write them when it ends
        (also when it ends with an exception: what pika took must go out)."""
        if self._gathered is not None:  # nested: the outer block writes
            yield
            return
        self._gathered = []
        self._gathered_bytes = 0
        try:
            yield
        finally:
            self._emit_gathered()
            self._gathered = None

    @property
    def body_max_length(self) -> int:
        """Largest body frame payload (negotiated frame_max minus the frame overhead)."""
        return int(self._body_max_length)

    def output_frames(self, marshaled: list[bytes]) -> None:
        """Write marshaled frames as pika's own methods do (its byte and frame
        counts included; the heartbeat checker reads them)."""
        self._output_marshaled_frames(marshaled)

    def _emit_gathered(self) -> None:
        gathered = self._gathered
        if not gathered:
            return
        data = gathered[0] if len(gathered) == 1 else b"".join(gathered)
        gathered.clear()
        self._gathered_bytes = 0
        if self._transport is None:
            return  # the stream is gone; its close callback reports the pending confirms
        self.writes += 1
        super()._adapter_emit_data(data)

    def _adapter_emit_data(self, data: bytes) -> None:
        gathered = self._gathered
        if gathered is None:
            self.writes += 1
            super()._adapter_emit_data(data)
            return
        gathered.append(data)
        self._gathered_bytes += len(data)
        if self._gathered_bytes >= COALESCE_BYTES:
            self._emit_gathered()
