"""The embedded broker's own fault rows: processes, pauses, heartbeat, disk and file faults.

Each row runs a scenario from ``tests/local/scenarios.py`` (the same code its
tests run) a counted number of times and sums what happened. LOST counts
confirmed messages never delivered while the data still exists; a confirmed
message that went down with a deleted or corrupted file is counted apart
("destroyed with the file"), and such a row passes only when every call after
the damage raised a typed error naming the file and nothing more was confirmed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.local import scenarios
from tests.local.harness import LocalHarness
from tests.scoreboard.checker import replace_section

#: fault -> (scenario, repeats in the scoreboard tier)
FAULTS: dict[str, tuple[Callable[[LocalHarness, int], scenarios.Result], int]] = {
    "competing-processes": (lambda h, n: scenarios.competing_consumers(h, n), 1),
    "paused-consumer": (lambda h, n: scenarios.paused_consumer(h), 20),
    "heartbeat-failure": (lambda h, n: scenarios.heartbeat_failure(h, min(n, 500)), 3),
    "disk-full": (lambda h, n: scenarios.disk_full(min(n, 1000)), 3),
    "corrupt-file": (lambda h, n: scenarios.corrupt_file(h, min(n, 500)), 3),
    "deleted-file": (lambda h, n: scenarios.deleted_file(h, min(n, 500)), 3),
}
DAMAGE = {"corrupt-file": ("consume", "ack", "close", "connect"),
          "deleted-file": ("background check", "ack", "consume", "close", "connect")}


@dataclass
class EmbeddedRow:
    fault: str
    repeats: int = 0
    attempted: int = 0
    confirmed: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    stale_refused: int = 0
    destroyed: int = 0
    typed_errors: int = 0
    seconds: float = 0.0
    error: str = ""

    HEADERS = ("broker", "fault", "repeats", "attempted", "confirmed", "delivered", "LOST", "duplicated",
               "stale refused", "destroyed with the file", "typed errors seen", "s", "result")

    @property
    def passed(self) -> bool:
        return not self.error and self.lost == 0

    def cells(self) -> tuple[str, ...]:
        return ("embedded", self.fault, str(self.repeats), str(self.attempted), str(self.confirmed),
                str(self.delivered), str(self.lost), str(self.duplicated), str(self.stale_refused),
                str(self.destroyed), str(self.typed_errors), f"{self.seconds:.0f}",
                "ok" if self.passed else f"FAIL {self.error}".strip())


def _check(fault: str, result: scenarios.Result) -> str:
    """Why *result* fails its fault's promise ("" when it keeps it)."""
    if result.thread_deaths:
        return f"a thread died: {result.thread_deaths[0]}"
    if fault in DAMAGE:
        where = {e.split(": ")[0]: e for e in result.errors}
        for call in DAMAGE[fault]:
            if ": DamagedFileError: " not in where.get(call, ""):
                return f"{call}: {where.get(call, 'no error')[:100]}"
    if fault == "disk-full":
        refusals = [e for e in result.errors if e.startswith("publish refused")]
        if not refusals or not all("disk is full" in e for e in refusals):
            return f"publishes not refused with the disk-full reason: {refusals[:1]}"
        if not any(e.startswith("ack: StorageFullError") for e in result.errors):
            return "no ack raised StorageFullError"
    return ""


def run_row(fault: str, n: int, repeats: int | None = None) -> EmbeddedRow:
    scenario, default = FAULTS[fault]
    row = EmbeddedRow(fault)
    started = time.monotonic()
    for _ in range(repeats or default):
        directory = Path(tempfile.mkdtemp(prefix="scoreboard-embedded-"))
        harness = LocalHarness(directory)
        try:
            result = scenario(harness, n)
        except Exception as exc:
            traceback.print_exc()
            row.error = f"{type(exc).__name__}: {str(exc)[:120]}"
            break
        finally:
            harness.cleanup()
            shutil.rmtree(directory, ignore_errors=True)
        h = result.history
        row.repeats += 1
        row.attempted += len(h.attempted)
        row.confirmed += len(h.confirmed)
        row.delivered += len(set(h.delivered))
        row.duplicated += sum(c - 1 for c in h.delivered.values() if c > 1)
        row.stale_refused += h.stale_refused
        row.destroyed += result.destroyed
        row.typed_errors += len(result.errors)
        # Confirmed and gone while the file still exists is LOST; gone with the file is counted apart.
        row.lost += len(h.confirmed - set(h.delivered)) - result.destroyed
        row.error = _check(fault, result)
        if row.error:
            break
    row.seconds = time.monotonic() - started
    return row


def run_embedded(n: int, faults: list[str] | None = None, repeats: int | None = None) -> list[EmbeddedRow]:
    rows = []
    for fault in FAULTS:
        if faults and fault not in faults:
            continue
        row = run_row(fault, n, repeats)
        print(" | ".join(row.cells()), flush=True)
        rows.append(row)
    return rows


METHOD = (
    "From `python -m tests.scoreboard.run --embedded` (scenarios in `tests/local/scenarios.py`, the same code "
    "`tests/local/test_embedded_faults.py` runs). competing-processes: 3 consumer processes share one queue. "
    "paused-consumer: issue 20's sequence -- consumer A (prefetch 100, lease_timeout 1) holds 30, is SIGSTOPped "
    "outside a SQLite write transaction (`pause_outside_write_lock` in scenarios.py: after each SIGSTOP a probe must "
    "take the broker file's write lock within 0.5 s, else A is resumed and stopped again; paused inside a write "
    "transaction A would stall every client of the file, docs/embedded-broker.md) for 6 s while B consumes, SIGCONTed, "
    "100 more are published, A is SIGKILLed, B drains, a fresh connection drains (130 ids a run). heartbeat-failure: "
    "heartbeats fail for 2 s (lease_timeout 1) while the consumer holds 20 deliveries. disk-full: an 8 MB tmpfs is "
    "filled while the consumer holds 5, 20 publishes are tried, the held deliveries are acked, space is freed. "
    "corrupt-file / deleted-file: the messages table's pages are overwritten / the file is deleted under an open "
    "connection. LOST = confirmed, never delivered, while the data still exists; destroyed with the file = confirmed "
    "before the file itself was destroyed (counted apart: such a row passes when every call after the damage raised "
    "DamagedFileError naming the file and nothing more was confirmed).")


def markdown(rows: list[EmbeddedRow]) -> str:
    lines = ["| " + " | ".join(EmbeddedRow.HEADERS) + " |", "|" + "---|" * len(EmbeddedRow.HEADERS)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


SECTION = "\n## Embedded broker faults"


def write_section(path: Path, rows: list[EmbeddedRow], when: str) -> None:
    """Put the embedded section into *path*, replacing an earlier one and keeping everything else."""
    replace_section(path, SECTION, f"{SECTION} (generated {when})\n\n{METHOD}\n\n{markdown(rows)}")
