"""Counting delivery guarantees the way Jepsen's total-queue and Kafka's
produce-consume-validate do: unique ids, a full drain, then set arithmetic.

LOST = confirmed but never delivered (nor dead-lettered when that was expected)
UNEXPECTED = delivered but never attempted. Both must be 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ackbridge.messages import ConfirmStatus


@dataclass
class History:
    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    indeterminate: set[str] = field(default_factory=set)
    delivered: Counter[str] = field(default_factory=Counter)
    dead_lettered: set[str] = field(default_factory=set)
    expected_dead: set[str] = field(default_factory=set)
    stale_refused: int = 0
    injections: int = 0
    recovery_s: float | None = None
    elapsed_s: float = 0.0

    def outcome(self, message_id: str, status: ConfirmStatus) -> None:
        {ConfirmStatus.CONFIRMED: self.confirmed, ConfirmStatus.REFUSED: self.refused,
         ConfirmStatus.UNKNOWN: self.indeterminate}[status].add(message_id)


@dataclass(frozen=True)
class ScoreRow:
    broker: str
    role: str
    fault: str
    injections: int
    attempted: int
    confirmed: int
    indeterminate: int
    delivered: int
    lost: int
    unexpected: int
    duplicated: int
    recovered: int
    dead_lettered: str
    stale_refused: int
    recovery_s: str
    msgs_per_s: str
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and self.lost == 0 and self.unexpected == 0

    HEADERS = ("broker", "role", "fault", "injections", "attempted", "confirmed", "indeterminate", "delivered",
               "LOST", "UNEXPECTED", "duplicated", "recovered", "dead-lettered (exp/act)", "stale refused",
               "recovery s", "msgs/s", "result")

    def cells(self) -> tuple[str, ...]:
        result = "ok" if self.passed else f"FAIL {self.error}".strip()
        return (self.broker, self.role, self.fault, str(self.injections), str(self.attempted), str(self.confirmed),
                str(self.indeterminate), str(self.delivered), str(self.lost), str(self.unexpected),
                str(self.duplicated), str(self.recovered), self.dead_lettered, str(self.stale_refused),
                self.recovery_s, self.msgs_per_s, result)


def score(broker: str, role: str, fault: str, history: History) -> ScoreRow:
    delivered_ids = set(history.delivered)
    accounted = delivered_ids | (history.dead_lettered & history.expected_dead)
    lost = history.confirmed - accounted
    unexpected = (delivered_ids | history.dead_lettered) - history.attempted
    duplicated = sum(n - 1 for n in history.delivered.values() if n > 1)
    recovered = delivered_ids & history.indeterminate
    rate = len(delivered_ids) / history.elapsed_s if history.elapsed_s else 0.0
    return ScoreRow(
        broker=broker, role=role, fault=fault, injections=history.injections,
        attempted=len(history.attempted), confirmed=len(history.confirmed),
        indeterminate=len(history.indeterminate), delivered=len(delivered_ids), lost=len(lost),
        unexpected=len(unexpected), duplicated=duplicated, recovered=len(recovered),
        dead_lettered=f"{len(history.expected_dead)}/{len(history.dead_lettered)}",
        stale_refused=history.stale_refused,
        recovery_s="-" if history.recovery_s is None else f"{history.recovery_s:.2f}",
        msgs_per_s=f"{rate:,.0f}",
    )


def failed_row(broker: str, role: str, fault: str, error: str) -> ScoreRow:
    """A cell that could not run: a failing row, never a silent skip."""
    return ScoreRow(broker, role, fault, 0, 0, 0, 0, 0, 0, 0, 0, 0, "-", 0, "-", "-", error=error or "did not run")


def markdown(rows: list[ScoreRow]) -> str:
    lines = ["| " + " | ".join(ScoreRow.HEADERS) + " |", "|" + "---|" * len(ScoreRow.HEADERS)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def replace_section(path: Path, heading: str, section: str) -> None:
    """Put *section* (starting with *heading*, a ``## `` line) into the markdown file
    *path*, replacing an earlier section with that heading and keeping everything else."""
    text = path.read_text() if path.exists() else "# Reliability scoreboard\n"
    if heading in text:
        before, rest = text.split(heading, 1)
        after = rest.split("\n## ", 1)
        text = before.rstrip() + "\n" + section + ("\n## " + after[1] if len(after) > 1 else "")
    else:
        text = text.rstrip() + "\n" + section
    path.write_text(text)
