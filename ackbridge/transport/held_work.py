"""What the fault seam holds back (``hold_publishes``, ``hold_writes``) in a
transport that writes from one event loop, written once for its plugins.

Held work waits in call order and is handed back on release; only what belongs
to the live generation is handed back. A loss ends every held publish as never
sent (:func:`~ackbridge.messages.unsent`: a retransmitting publisher does not
count it as an attempt) and drops held settlements (their generation ended: the
broker delivers those messages again); holding goes on until it is released.
Call every method on the transport's loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ackbridge.messages import WireSettle, unsent
from ackbridge.transport import TransportEvents

#: A held publish: its sequence number, its generation, and what the transport sends it with.
HeldPublish = tuple[int, int, tuple[Any, ...]]


class HeldWork:
    """The publishes and settlements a transport's fault seam holds back."""

    __slots__ = ("_events", "_generation", "publishes", "writes")

    def __init__(self, events: TransportEvents, generation: Callable[[], int]) -> None:
        self._events = events
        self._generation = generation
        #: None: not holding publishes.
        self.publishes: list[HeldPublish] | None = None
        #: None: not holding settlements.
        self.writes: list[WireSettle] | None = None

    def keep_publish(self, seq: int, *prepared: Any) -> bool:
        """Hold publish *seq* (True), or False when publishes are not held."""
        if self.publishes is None:
            return False
        self.publishes.append((seq, self._generation(), prepared))
        return True

    def keep_settle(self, ops: Sequence[WireSettle]) -> bool:
        """Hold *ops* (True), or False when settlements are not held."""
        if self.writes is None:
            return False
        self.writes.extend(ops)
        return True

    def hold_publishes(self, hold: bool) -> list[tuple[int, tuple[Any, ...]]]:
        """Start holding publishes, or stop: then (seq, prepared) of each held publish of
        the live generation, in call order, for the caller to send."""
        held: list[HeldPublish] = self._switch("publishes", hold)
        live = self._generation()
        return [(seq, prepared) for seq, generation, prepared in held if generation == live]

    def hold_writes(self, hold: bool) -> list[WireSettle]:
        """Start holding settlements, or stop: then the held ones of the live generation."""
        held: list[WireSettle] = self._switch("writes", hold)
        live = self._generation()
        return [op for op in held if op.generation == live]

    def _switch(self, kind: str, hold: bool) -> list[Any]:
        """Start holding *kind* ("publishes" or "writes"; nothing to hand back), or
        stop: what was held, for the caller to filter by generation."""
        held = getattr(self, kind)
        if hold:
            if held is None:
                setattr(self, kind, [])
            return []
        setattr(self, kind, None)
        return held or []

    def lost(self, reason: str) -> None:
        """The connection went: held publishes end unsent, held settlements are dropped."""
        if self.publishes:
            held, self.publishes = self.publishes, []
            outcome = unsent(f"{reason}; the held publish was never sent")
            self._events.confirm_batch([(seq, outcome) for seq, _generation, _prepared in held])
        if self.writes:
            self.writes = []
