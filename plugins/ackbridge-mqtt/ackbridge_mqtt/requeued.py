"""What this process requeued over MQTT 3.1.1, so the copy comes back flagged.

A 3.1.1 copy cannot carry a marker (no properties), so the transport
remembers (topic, body digest) of each copy it published and takes the mark
off when that copy arrives. Bounded and in-process only: another process
sees the copy as a first delivery (documented in docs/brokers/mqtt.md).
"""

from __future__ import annotations

import collections
import hashlib
import threading

#: Most copies remembered; the oldest are forgotten first.
LIMIT = 10_000


class RequeuedMemory:
    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._counts: collections.OrderedDict[tuple[str, bytes], int] = collections.OrderedDict()

    @staticmethod
    def _key(topic: str, body: bytes) -> tuple[str, bytes]:
        return topic, hashlib.sha1(body).digest()

    def remember(self, topic: str, body: bytes) -> None:
        key = self._key(topic, body)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            while len(self._counts) > self._limit:
                self._counts.popitem(last=False)

    def take(self, topic: str, body: bytes) -> bool:
        """True (once per remembered copy) if *body* on *topic* is a copy this process requeued."""
        key = self._key(topic, body)
        with self._lock:
            left = self._counts.get(key, 0)
            if not left:
                return False
            if left == 1:
                del self._counts[key]
            else:
                self._counts[key] = left - 1
            return True
