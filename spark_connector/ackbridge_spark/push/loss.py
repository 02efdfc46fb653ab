"""``failOnDataLoss``: the loss detection of guaranteed publishing, for a query.

A publisher made with ``publisher(sequence=True)`` stamps each message with
its producer id and a sequence number (:mod:`ackbridge.kernel.guaranteed`:
``ackbridge-producer`` / ``ackbridge-seq``). The core's consumer-side
detector (``consume(on_gap=...)``) keeps the highest number per producer in
memory, so a restarted consumer would report everything its predecessor
consumed as missing. A Spark query restarts from its checkpoint: here the
highest number per (source, producer) travels in each planned offset, so a
restarted runner resumes where the last planned batch left off.

A gap (numbers skipped) is logged and counted (``data_loss`` in the source's
progress); with ``failOnDataLoss=true`` the query fails with
:class:`~ackbridge.errors.DataLossError` before the batch is planned (nothing
of it is settled: the broker keeps what it still holds).

Same rules as the core's ``GapDetector``: numbers start at 1, a number at or
below the highest seen is a redelivery or a copy. Kept per source because each
source is one consumer there.

Offset logs need no numbers: what retention removed is reported by
:mod:`ackbridge_spark.log.loss`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from ackbridge.errors import DataLossError
from ackbridge.kernel.guaranteed import sequence_of

log = logging.getLogger("ackbridge.spark")

#: Producers remembered per query (least recently seen forgotten first): the offset stays small.
MAX_PRODUCERS = 512


class LossWatch:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        #: "source\x00producer" -> highest number seen, least recently seen first.
        self._highest: OrderedDict[str, int] = OrderedDict()
        self.missing = 0
        self._seeded = False

    def seed(self, offset: dict[str, Any] | None) -> None:
        """Take the state carried by *offset* (once per runner, from the first start offset)."""
        if self._seeded:
            return
        self._seeded = True
        for key, number in ((offset or {}).get("producers") or {}).items():
            self._highest.setdefault(str(key), int(number))

    def state(self) -> dict[str, int]:
        """What a planned offset carries (empty when no message was numbered)."""
        return dict(self._highest)

    def check(self, source: str, headers: Any) -> None:
        """Note one delivery's number; a jump is a gap: log and count it, or raise."""
        stamp = sequence_of(headers)
        if stamp is None:
            return
        producer, number = stamp
        key = f"{source}\x00{producer}"
        highest = self._highest.get(key, 0)
        if number <= highest:
            return  # a redelivery or a retransmitted copy
        self._highest[key] = number
        self._highest.move_to_end(key)
        if len(self._highest) > MAX_PRODUCERS:
            self._highest.popitem(last=False)
        if number == highest + 1:
            return
        skipped = number - highest - 1
        self.missing += skipped
        shown = f"{highest + 1}..{number - 1}" if skipped > 1 else str(highest + 1)
        text = (f"data loss on source {source!r}: {skipped} message(s) of producer {producer} never arrived "
                f"(sequence numbers {shown})")
        if self.fail:
            raise DataLossError(f"{text}. The query stops because failOnDataLoss=true; set it to false to log "
                                "and count losses (data_loss in the source's progress) instead",
                                str(producer), tuple(range(highest + 1, min(number, highest + 1 + 10_000))))
        log.warning("ackbridge source: %s (failOnDataLoss=false: counted, the query goes on)", text)

