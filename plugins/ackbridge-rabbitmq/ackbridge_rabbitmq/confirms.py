"""Publisher-confirm bookkeeping for one confirm-mode channel (no I/O, one thread).

Delivery tags of a confirm channel count 1, 2, 3... from confirm.select; the
core numbers publishes with its own ``seq``. This maps one onto the other,
honours ``multiple`` on Basic.Ack/Nack and remembers Basic.Return (which the
broker sends *before* the ack of the same message) so that ack becomes a
refusal. Returns carry no delivery tag: they are matched by message_id.
"""

from __future__ import annotations

from ackbridge.messages import CONFIRMED, ConfirmOutcome, refused, unknown


class ConfirmTracker:
    def __init__(self) -> None:
        self.next_tag = 0
        # tag -> (core seq, message_id, body size); dicts keep insertion (= tag) order.
        self._pending: dict[int, tuple[int, str, int]] = {}
        self._returned: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def sent(self, seq: int, message_id: str, size: int = 0) -> None:
        self.next_tag += 1
        self._pending[self.next_tag] = (seq, message_id, size)

    def returned(self, message_id: str | None, reason: str) -> None:
        """Mark the oldest pending publish with this message_id that is not
        returned yet. Returns are rare (unroutable publishes), so they search the
        pending publishes instead of every publish paying for an index by id; the
        one returned is near the front (its ack follows the return)."""
        if message_id is None:
            return
        returned = self._returned
        for tag, (_seq, pending_id, _size) in self._pending.items():
            if pending_id == message_id and tag not in returned:
                returned[tag] = reason
                return

    def answered(self, tag: int, multiple: bool, ack: bool) -> list[tuple[int, ConfirmOutcome]]:
        """Outcomes for a Basic.Ack (ack=True) or Basic.Nack."""
        pending = self._pending
        if multiple:
            tags = []
            for waiting in pending:
                if waiting > tag:
                    break
                tags.append(waiting)
        else:
            tags = [tag] if tag in pending else []
        returned = self._returned
        out: list[tuple[int, ConfirmOutcome]] = []
        for done in tags:
            seq = pending.pop(done)[0]
            reason = returned.pop(done, None) if returned else None
            if reason is not None:
                out.append((seq, refused(reason)))
            elif ack:
                out.append((seq, CONFIRMED))
            else:
                out.append((seq, refused("the broker nacked the publish (Basic.Nack: internal error)")))
        return out

    def refuse_size(self, size: int, reason: str) -> list[tuple[int, ConfirmOutcome]]:
        """Refuse the oldest pending publish whose body has *size* bytes (the broker
        named its size when it closed the channel over it)."""
        for tag, (seq, _id, body_size) in self._pending.items():
            if body_size == size:
                del self._pending[tag]
                self._returned.pop(tag, None)
                return [(seq, refused(reason))]
        return []

    def lose_all(self, reason: str) -> list[tuple[int, ConfirmOutcome]]:
        """Every pending publish becomes unknown (channel or connection gone)."""
        outcome = unknown(reason)
        out = [(seq, outcome) for seq, _id, _size in self._pending.values()]
        self._pending.clear()
        self._returned.clear()
        return out
