"""Publisher-confirm bookkeeping for one confirm-mode channel (no I/O, one thread).

Delivery tags of a confirm channel count 1, 2, 3... from confirm.select; the
core numbers publishes with its own ``seq``. This maps one onto the other,
honours ``multiple`` on Basic.Ack/Nack and remembers Basic.Return (which the
broker sends *before* the ack of the same message) so that ack becomes a
refusal. Returns carry no delivery tag: they are matched by message_id.
"""

from __future__ import annotations

from collections import deque

from ackbridge.messages import CONFIRMED, ConfirmOutcome, refused, unknown


class ConfirmTracker:
    def __init__(self) -> None:
        self.next_tag = 0
        # tag -> (core seq, message_id); dicts keep insertion (= tag) order.
        self._pending: dict[int, tuple[int, str]] = {}
        self._by_id: dict[str, deque[int]] = {}
        self._returned: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def sent(self, seq: int, message_id: str) -> None:
        self.next_tag += 1
        tag = self.next_tag
        self._pending[tag] = (seq, message_id)
        tags = self._by_id.get(message_id)
        if tags is None:
            self._by_id[message_id] = deque((tag,))
        else:
            tags.append(tag)

    def returned(self, message_id: str | None, reason: str) -> None:
        tags = self._by_id.get(message_id or "")
        if not tags:
            return
        for tag in tags:
            if tag not in self._returned:
                self._returned[tag] = reason
                return

    def answered(self, tag: int, multiple: bool, ack: bool) -> list[tuple[int, ConfirmOutcome]]:
        """Outcomes for a Basic.Ack (ack=True) or Basic.Nack."""
        if multiple:
            tags = []
            for pending in self._pending:
                if pending > tag:
                    break
                tags.append(pending)
        else:
            tags = [tag] if tag in self._pending else []
        out: list[tuple[int, ConfirmOutcome]] = []
        for done in tags:
            seq, message_id = self._pending.pop(done)
            self._forget_id(message_id, done)
            reason = self._returned.pop(done, None)
            if reason is not None:
                out.append((seq, refused(reason)))
            elif ack:
                out.append((seq, CONFIRMED))
            else:
                out.append((seq, refused("the broker nacked the publish (Basic.Nack: internal error)")))
        return out

    def lose_all(self, reason: str) -> list[tuple[int, ConfirmOutcome]]:
        """Every pending publish becomes unknown (channel or connection gone)."""
        outcome = unknown(reason)
        out = [(seq, outcome) for seq, _ in self._pending.values()]
        self._pending.clear()
        self._by_id.clear()
        self._returned.clear()
        return out

    def _forget_id(self, message_id: str, tag: int) -> None:
        tags = self._by_id.get(message_id)
        if tags is None:
            return
        if tags and tags[0] == tag:
            tags.popleft()
        else:
            try:
                tags.remove(tag)
            except ValueError:
                pass
        if not tags:
            del self._by_id[message_id]
