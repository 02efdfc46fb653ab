"""``failOnDataLoss`` for offset logs: what retention removed before the query read it.

Offset logs need no sequence numbers (the driver-side source's loss detection:
:mod:`ackbridge_spark.push.loss`): what retention removed shows as a range's
start below the log's first offset. :func:`report_removed` is the one rule for
it, on the driver (a batch planned, or replayed from the checkpoint) and on the
executors (retention between the plan and the read).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ackbridge.errors import DataLossError

log = logging.getLogger("ackbridge.spark")


#: ``(partition, start, end)``: offsets ``[start, end)`` of *partition* that retention removed.
Removed = tuple[str, int, int]


def report_removed(removed: Sequence[Removed], fail: bool, when: str) -> int:
    """Offsets retention removed before the query read them (*when* says which read):
    raise :class:`~ackbridge.errors.DataLossError` naming each range with *fail*
    (``failOnDataLoss=true``), else log them at WARNING. Returns how many offsets."""
    removed = [r for r in removed if r[2] > r[1]]
    if not removed:
        return 0
    count = sum(end - start for _p, start, end in removed)
    text = ", ".join(f"offsets [{start}, {end}) of {p!r} ({end - start})" for p, start, end in removed)
    if fail:
        raise DataLossError(f"data loss: retention removed {text} {when}. The query stops because "
                            "failOnDataLoss=true; set it to false to count such losses (data_loss in the "
                            "source's progress) and read the records that remain", "", ())
    log.warning("ackbridge stream source: data loss: retention removed %s %s (failOnDataLoss=false: "
                "%d offsets skipped, the query goes on)", text, when, count)
    return count
