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
    #: Handed to the application, per id, and when first (time.monotonic()).
    delivered: Counter[str] = field(default_factory=Counter)
    delivered_at: dict[str, float] = field(default_factory=dict)
    #: Copies the consumer's dedupe window acked without handing them out.
    dropped_copies: int = 0
    #: Per id, acks the application was told failed (StaleDeliveryError: the connection ended
    #: before the ack was written, so the broker never had it). The delivery that follows each is
    #: the message again, owed to the application under at-least-once: not a copy.
    stale_acks: Counter[str] = field(default_factory=Counter)
    #: Sends again by ackbridge's publisher (publisher.retransmitted).
    retransmitted: int = 0
    #: Ids the test (as the application) published again on a new publisher, its first publisher's
    #: process killed with them unresolved (embedded process-kill): not ackbridge retransmissions.
    replayed: int = 0
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
    #: A broker that keeps confirms in memory until its next save: its last save before the kill
    #: (time.monotonic(); -inf: never saved; None: not read). What it confirmed before is on disk.
    last_save: float | None = None
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
    #: The allowance for broker_lost: ids confirmed after the broker's last save before the kill
    #: (what its capability table says a kill may lose), and how long before the kill that save was.
    unsaved: int = 0
    unsaved_s: float | None = None
    #: Not a column: ids confirmed before that save and first delivered after the kill (they survived it).
    saved_before: int = 0
    survived: int = 0
    unexpected: int = 0
    duplicated: int = 0
    recovered: int = 0
    retransmitted: int = 0
    replayed: int = 0
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
    #: Publishes the broker refused (final, never sent again; MQTT 5: 0x10, no matching subscribers).
    refused: int = 0
    #: Not a column: acks that raised StaleDeliveryError (each owes the application the message again).
    stale_acks: int = 0

    HEADERS = ("broker", "role", "fault", "mode", "injections", "confirms pending at fault", "attempted",
               "confirmed", "refused", "indeterminate", "delivered", "LOST",
               "lost by the broker (of confirmed after its last save; that save's age at the kill)", "UNEXPECTED",
               "duplicated", "recovered", "retransmitted", "replayed by the application",
               "duplicates delivered to the application", "left in the queue", "recovery s", "s", "result")

    @property
    def passed(self) -> bool:
        if self.error or self.lost or self.unexpected or self.left:
            return False
        if self.broker_lost > self.unsaved:  # score() books only unsaved ids: never true, kept as the rule
            return False
        if self.mode == "retransmit":
            # Every attempted id delivered (bar what the broker itself lost after confirming, and
            # what it refused: final, told to the application), once.
            return (self.app_duplicates == 0 and self.indeterminate == 0
                    and self.delivered == self.attempted - self.broker_lost - self.refused)
        return True

    def broker_lost_cell(self) -> str:
        if self.unsaved_s is None:
            return str(self.broker_lost)  # no allowance: a broker loss would be LOST
        age = "never saved" if self.unsaved_s == float("inf") else f"{self.unsaved_s:.2f} s"
        return f"{self.broker_lost} of {self.unsaved}; {age}"

    def allowance_note(self) -> str:
        """The numbers behind "lost by the broker", for the text under the table."""
        if self.unsaved_s is None:
            return ""
        when = ("the broker had not saved its store since the row began" if self.unsaved_s == float("inf")
                else f"the broker's last save came {self.unsaved_s:.2f} s before the kill")
        return (f"{self.broker} {self.fault} {self.mode}: {when}; {self.saved_before} ids confirmed before it "
                f"({self.survived} of them delivered only after the restart: they survived the kill) and "
                f"{self.unsaved} after it, {self.broker_lost} of which were lost (lost by the broker); "
                f"{self.lost} LOST.")

    def cells(self) -> tuple[str, ...]:
        result = "ok" if self.passed else f"FAIL {self.error}".strip()
        return (self.broker, "publisher", self.fault, self.mode, str(self.injections), str(self.pending_at_fault),
                str(self.attempted), str(self.confirmed), str(self.refused), str(self.indeterminate),
                str(self.delivered), str(self.lost), self.broker_lost_cell(), str(self.unexpected),
                str(self.duplicated), str(self.recovered), str(self.retransmitted), str(self.replayed),
                str(self.app_duplicates),
                "-" if self.left is None else str(self.left), self.recovery_s,
                f"{self.seconds:.1f}", result)


def unsaved_at_kill(target: Target, fault: str, h: PubHistory) -> set[str] | None:
    """What a kill may lose: the ids the broker confirmed after its last save before it died, where
    its capability table says a confirm is in memory until the next save. None: no allowance."""
    if fault == "connection-cut" or target.durability not in LOSES_ON_KILL or h.last_save is None:
        return None
    # Mosquitto is single-threaded: it sends nothing while it saves, so a PUBACK that reached us
    # before the save ended (the store's mtime) was sent before the save began and the message is
    # in the store. Only one confirmed later may be gone.
    last_save = h.last_save
    return {m for m in h.confirmed_at_fault if h.resolved_at.get(m, last_save) > last_save}


def score(target: Target, fault: str, mode: str, h: PubHistory) -> PublisherRow:
    delivered = set(h.delivered)
    missing = h.confirmed - delivered
    # Only a broker whose table says a kill can lose confirmed messages may lose them, and only those
    # it confirmed after its last save before it died: counted apart, never hidden in LOST. Anything
    # else confirmed and never delivered is LOST.
    unsaved = unsaved_at_kill(target, fault, h)
    broker_lost = missing & unsaved if unsaved is not None else set()
    unsaved_s = (h.fault_start - h.last_save) if (unsaved is not None and h.fault_start is not None
                                                 and h.last_save is not None) else None
    saved_before = h.confirmed_at_fault - unsaved if unsaved is not None else set()
    kill = h.fault_start if h.fault_start is not None else float("inf")
    survived = {m for m in saved_before if h.delivered_at.get(m, 0.0) > kill}
    recovery = (h.first_confirm_after - h.fault_end) if h.fault_end and h.first_confirm_after else None
    return PublisherRow(
        broker=target.broker, fault=fault, mode=mode, injections=h.injections, pending_at_fault=h.pending_at_fault,
        attempted=len(h.attempted), confirmed=len(h.confirmed), indeterminate=len(h.indeterminate),
        delivered=len(delivered), lost=len(missing - broker_lost), broker_lost=len(broker_lost),
        unsaved=len(unsaved or ()), unsaved_s=unsaved_s, saved_before=len(saved_before), survived=len(survived),
        unexpected=len(delivered - h.attempted),
        duplicated=sum(c - 1 for c in h.delivered.values()) + h.dropped_copies,
        recovered=len(delivered & h.indeterminate), retransmitted=h.retransmitted, replayed=h.replayed,
        app_duplicates=sum(max(c - 1 - h.stale_acks[m], 0) for m, c in h.delivered.items()),
        recovery_s="-" if recovery is None else f"{max(recovery, 0.0):.2f}", seconds=h.elapsed_s,
        published_during_fault=h.published_during_fault,
        lost_timeline=h.timeline(missing - broker_lost) if missing - broker_lost else "",
        refused=len(h.refused), stale_acks=sum(h.stale_acks.values()))


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
    "`persistence true`, `autosave_interval 1` (Mosquitto 2.0 saves once more than the interval has passed "
    "in whole seconds: a save every 2 s) SIGKILLed, 2 s, started on its store (past n/2 publishing is "
    "paced at 5 ms until the broker has saved once and its next save is 0.3 s away, then at full speed, so "
    "the consumer lags; n/10 publishes after that save is seen (the store file's mtime) the broker is "
    "SIGSTOPped, confirming and saving nothing more, and SIGKILLed once 50 confirms are pending; "
    "`max_queued_messages 100000`, so its queue limit drops nothing); a private nats-server with a "
    "JetStream file store SIGKILLed, 2 s, started (the stream's "
    "ack_wait is 5 s: JetStream forgets acks not yet written at a kill and redelivers them after ack_wait). "
    "process-kill (embedded): the publisher's process, which holds the broker, SIGKILLed while its "
    "last publishes (half the window) are held in its group commit (the fault seam's hold_writes), so "
    "their confirms are pending at the kill. While the fault lasts, publishing goes on at one message per 5 ms, so "
    "publishes meet the outage; 50 more follow it, until one is confirmed (recovery s = fault end to that "
    "confirm). plain: each id published once; unknowns are counted (indeterminate) and LOST = confirmed, "
    "never delivered, must be 0; recovered = unknown but delivered. retransmit: `publisher(retransmit=True, "
    "max_attempts=50, retransmit_deadline=150)` and `consume(dedupe_window=10*n)`: every attempted id must be "
    "delivered (bar refused ones: final, told to the application; MQTT 5 answers 0x10 where no session "
    "holds the topic) and none twice to the application (bar the delivery that follows an ack which raised "
    "`StaleDeliveryError`: the broker never had that ack, so the message comes again, as at-least-once "
    "promises); duplicated = copies the broker delivered (the "
    "dedupe window acked and dropped them, or plain mode handed them out); retransmitted = ackbridge's sends "
    "again. A killed process's retransmission queue dies with it: for embedded process-kill the test, as the "
    "application, publishes the killed publisher's unresolved ids again on a new publisher (same message ids), "
    "counted in \"replayed by the application\", not in retransmitted; LOST must be 0 there too. lost by the "
    "broker: only where the capability table says a confirm is \"in memory until the next save\" (Mosquitto), "
    "and only ids the broker confirmed after its last save before the kill (\"of N\"; the save's age at the "
    "kill follows); an id confirmed before that save and never delivered is LOST. left in the queue: ready + "
    "unacked on the broker after the drain (Mosquitto: not readable, `-`).")
SECTION = "\n## Publisher rows"


def write_section(path: Path, rows: list[PublisherRow], n: int) -> None:
    """Put the publisher section into *path*, replacing an earlier one and keeping everything else."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    notes = "".join(f"\n- {note}" for row in rows if (note := row.allowance_note()))
    numbers = f"\nLost by the broker, the numbers:{notes}\n" if notes else ""
    title = f"{SECTION} (issue 15; generated {when}, {n} ids per cell)"
    replace_section(path, SECTION, f"{title}\n\n{METHOD}\n\n{markdown(rows)}{numbers}")
