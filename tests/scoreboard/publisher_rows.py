"""The publisher rows' arithmetic and report: the history a cell keeps, the row it scores to,
the table and the method text of docs/scoreboard.md's "Publisher rows" section."""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ackbridge.messages import ConfirmStatus
from tests.scoreboard.checker import replace_section
from tests.scoreboard.publisher_targets import LOSES_ON_KILL, Target


@dataclass
class PubHistory:
    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    indeterminate: set[str] = field(default_factory=set)
    #: Confirmed before the broker died (a broker that loses unsaved confirms may lose only these).
    confirmed_at_fault: set[str] = field(default_factory=set)
    #: Handed to the application, per id.
    delivered: Counter[str] = field(default_factory=Counter)
    #: Copies the consumer's dedupe window acked without handing them out.
    dropped_copies: int = 0
    retransmitted: int = 0
    pending_at_fault: int = 0
    #: Publishes made while the fault lasted (a broker restart): they met the outage.
    published_during_fault: int = 0
    injections: int = 0
    fault_end: float | None = None
    first_confirm_after: float | None = None
    elapsed_s: float = 0.0
    #: When the fault was issued and when its outage ended (time.monotonic()), and, per id, when
    #: it was published and when its confirm resolved: what a LOST id's report says.
    fault_start: float | None = None
    down_at: float | None = None
    published_at: dict[str, float] = field(default_factory=dict)
    resolved_at: dict[str, float] = field(default_factory=dict)

    def timeline(self, ids: set[str], limit: int = 5) -> str:
        """When each of *ids* was published and resolved, in seconds from the fault's start."""
        origin = self.fault_start if self.fault_start is not None else 0.0

        def rel(t: float | None) -> str:
            return "-" if t is None else f"{t - origin:+.2f} s"

        lines = [f"fault at 0 s, outage end (down) {rel(self.down_at)}, broker back {rel(self.fault_end)}"]
        for message_id in sorted(ids)[:limit]:
            lines.append(f"{message_id}: published {rel(self.published_at.get(message_id))}, "
                         f"resolved {rel(self.resolved_at.get(message_id))}")
        return "; ".join(lines)

    def outcome(self, message_id: str, status: ConfirmStatus) -> None:
        {ConfirmStatus.CONFIRMED: self.confirmed, ConfirmStatus.REFUSED: self.refused,
         ConfirmStatus.UNKNOWN: self.indeterminate}[status].add(message_id)


@dataclass(frozen=True)
class PublisherRow:
    broker: str
    fault: str
    mode: str
    injections: int = 0
    pending_at_fault: int = 0
    attempted: int = 0
    confirmed: int = 0
    indeterminate: int = 0
    delivered: int = 0
    lost: int = 0
    broker_lost: int = 0
    unexpected: int = 0
    duplicated: int = 0
    recovered: int = 0
    retransmitted: int = 0
    app_duplicates: int = 0
    recovery_s: str = "-"
    #: Not a column: publishes made while the fault lasted (the row check's evidence for a restart).
    published_during_fault: int = 0
    #: Messages the broker still held after the drain (ready + unacked), broker-side; None: cannot tell.
    left: int | None = None
    seconds: float = 0.0
    error: str = ""
    #: For LOST ids: when each was published and confirmed, relative to the fault (not in the table).
    lost_timeline: str = ""
    #: Publishes the broker refused (final, never sent again; MQTT 5: 0x10 after a restart). Not in the table.
    refused: int = 0

    HEADERS = ("broker", "role", "fault", "mode", "injections", "confirms pending at fault", "attempted",
               "confirmed", "indeterminate", "delivered", "LOST", "lost by the broker", "UNEXPECTED",
               "duplicated", "recovered", "retransmitted", "duplicates delivered to the application",
               "left in the queue", "recovery s", "s", "result")

    @property
    def passed(self) -> bool:
        if self.error or self.lost or self.unexpected or self.left:
            return False
        if self.mode == "retransmit":
            # Every attempted id delivered (bar what the broker itself lost after confirming, and
            # what it refused: final, told to the application), once.
            return (self.app_duplicates == 0 and self.indeterminate == 0
                    and self.delivered == self.attempted - self.broker_lost - self.refused)
        return True

    def cells(self) -> tuple[str, ...]:
        result = "ok" if self.passed else f"FAIL {self.error}".strip()
        return (self.broker, "publisher", self.fault, self.mode, str(self.injections), str(self.pending_at_fault),
                str(self.attempted), str(self.confirmed), str(self.indeterminate), str(self.delivered),
                str(self.lost), str(self.broker_lost), str(self.unexpected), str(self.duplicated),
                str(self.recovered), str(self.retransmitted), str(self.app_duplicates),
                "-" if self.left is None else str(self.left), self.recovery_s,
                f"{self.seconds:.1f}", result)


def score(target: Target, fault: str, mode: str, h: PubHistory) -> PublisherRow:
    delivered = set(h.delivered)
    missing = h.confirmed - delivered
    # Only a broker whose table says a kill can lose confirmed messages may lose them, and only those
    # confirmed before it died: counted apart, never hidden in LOST.
    broker_lost = (missing & h.confirmed_at_fault) if (fault != "connection-cut"
                                                       and target.durability in LOSES_ON_KILL) else set()
    recovery = (h.first_confirm_after - h.fault_end) if h.fault_end and h.first_confirm_after else None
    return PublisherRow(
        broker=target.broker, fault=fault, mode=mode, injections=h.injections, pending_at_fault=h.pending_at_fault,
        attempted=len(h.attempted), confirmed=len(h.confirmed), indeterminate=len(h.indeterminate),
        delivered=len(delivered), lost=len(missing - broker_lost), broker_lost=len(broker_lost),
        unexpected=len(delivered - h.attempted),
        duplicated=sum(c - 1 for c in h.delivered.values()) + h.dropped_copies,
        recovered=len(delivered & h.indeterminate), retransmitted=h.retransmitted,
        app_duplicates=sum(c - 1 for c in h.delivered.values()),
        recovery_s="-" if recovery is None else f"{max(recovery, 0.0):.2f}", seconds=h.elapsed_s,
        published_during_fault=h.published_during_fault,
        lost_timeline=h.timeline(missing - broker_lost) if missing - broker_lost else "",
        refused=len(h.refused))


def markdown(rows: list[PublisherRow]) -> str:
    lines = ["| " + " | ".join(PublisherRow.HEADERS) + " |", "|" + "---|" * len(PublisherRow.HEADERS)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


METHOD = (
    "From `python -m tests.scoreboard.publisher` (`tests/scoreboard/publisher.py`, targets in "
    "`publisher_targets.py`; CI runs the same cells on 300 ids: `tests/scoreboard/test_publisher_rows.py`). "
    "Each cell publishes unique ids (message id = body) with a window of 200 while a consumer on its own "
    "connection takes and acks them; past n/2 the fault hits once 50 confirms are pending (by 3n/4 at the "
    "latest; column 6: unresolved when it was issued). connection-cut: the publisher's connection "
    "severed through the fault seam (`ackbridge.testing.faults(conn).sever`). broker-restart: RabbitMQ "
    "`rabbitmqctl stop_app`, 2 s, "
    "`start_app` (classic, quorum and AMQP 1.0 on the shared broker); a private Mosquitto with "
    "`persistence true`, `autosave_interval 1` (a save a second) SIGKILLed, 2 s, started on its "
    "store; a private nats-server with a JetStream file store SIGKILLed, 2 s, started (the stream's "
    "ack_wait is 5 s: JetStream forgets acks not yet written at a kill and redelivers them after ack_wait). "
    "process-kill (embedded): the publisher's process, which holds the broker, SIGKILLed while its "
    "last publishes (half the window) are held in its group commit (the fault seam's hold_writes), so "
    "their confirms are pending at the kill. While the fault lasts, publishing goes on at one message per 5 ms, so "
    "publishes meet the outage; 50 more follow it, until one is confirmed (recovery s = fault end to that "
    "confirm). plain: each id published once; unknowns are counted (indeterminate) and LOST = confirmed, "
    "never delivered, must be 0; recovered = unknown but delivered. retransmit: `publisher(retransmit=True, "
    "max_attempts=50, retransmit_deadline=150)` and `consume(dedupe_window=10*n)`: every attempted id must be "
    "delivered and none twice to the application; duplicated = copies the broker delivered (the dedupe "
    "window acked and dropped them, or plain mode handed them out); retransmitted = sends again. A killed "
    "process's retransmission queue dies with it: for embedded process-kill, retransmitted counts the ids "
    "the application replayed on a new publisher (same message ids). lost by the broker: confirmed before a "
    "kill and never delivered, counted only where the capability table says a confirm is \"in memory until "
    "the next save\" (Mosquitto); never hidden in LOST. left in the queue: ready + unacked on the broker "
    "after the drain (Mosquitto: not readable, `-`).")
SECTION = "\n## Publisher rows"


def write_section(path: Path, rows: list[PublisherRow], n: int) -> None:
    """Put the publisher section into *path*, replacing an earlier one and keeping everything else."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    replace_section(path, SECTION,
                    f"{SECTION} (issue 15; generated {when}, {n} ids per cell)\n\n{METHOD}\n\n{markdown(rows)}")
