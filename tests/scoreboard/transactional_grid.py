"""The transactional rows of the scoreboard (issue 35): every broker x {PostgreSQL, SQLite} x
{consumer kills, relay kill, cut mid-publish, refused publish}, and their section of
docs/scoreboard.md.

    .venv/bin/python -m tests.scoreboard.transactional_grid --n 300 --write

CI runs one cell per broker (``tests/scoreboard/test_transactional_rows.py``); this runs the grid.
A cell that cannot run is a failing row, and a fault a broker cannot have is a ``gap`` row, never
a pass.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
import traceback
from pathlib import Path

from ackbridge.urls import redact
from tests.scoreboard.checker import replace_section
from tests.scoreboard.transactional_cells import CELLS, FAULTS, TxRow, markdown, prepare
from tests.scoreboard.transactional_targets import GRID_BROKERS, make_target
from tests.transactional.appdb import AppDb
from tests.transactional.conftest import make_db

DATABASES = ("postgres", "sqlite")
#: ids per cell, and how many of them are published twice (the grid's default; CI uses fewer).
N, COPIES = 300, 50


def run_cell(broker: str, db: str, fault: str, n: int = N, copies: int = COPIES) -> TxRow:
    row = TxRow(broker, db, fault)
    started = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="abtx-db-"))
    app_db: AppDb | None = None
    try:
        target = make_target(broker)
    except Exception as exc:
        traceback.print_exc()
        return TxRow(broker, db, fault, error=f"broker unavailable: {redact(str(exc))[:160]}")
    try:
        app_db = make_db(db, directory)
        prepare(app_db)
        row.sharing = target.sharing
        row = CELLS[fault](target, app_db, row, n, copies)
    except Exception as exc:
        traceback.print_exc()
        row.error = f"{type(exc).__name__}: {redact(str(exc))[:200]}"
    finally:
        if app_db is not None:
            app_db.drop_all()
        target.cleanup()
    print(f"{broker} {db} {fault}: {time.monotonic() - started:.1f} s", flush=True)
    return row


def cells(brokers: list[str] | None = None, dbs: list[str] | None = None,
          faults: list[str] | None = None) -> list[tuple[str, str, str]]:
    return [(b, d, f) for b in GRID_BROKERS for d in DATABASES for f in FAULTS
            if (not brokers or b in brokers) and (not dbs or d in dbs) and (not faults or f in faults)]


METHOD = (
    "From `python -m tests.scoreboard.transactional_grid` (`tests/scoreboard/transactional_*.py`; CI runs one "
    "cell per broker: `tests/scoreboard/test_transactional_rows.py`). The application's database is PostgreSQL "
    "(127.0.0.1:5432, psycopg 3) or a SQLite file; its effect table has no unique constraint, so a handler run "
    "twice for one id shows as a second row (duplicated effects). consumer-kills: every id published, the "
    "first copies of them a second time under the same message id (a retransmission the broker stores twice; "
    "JetStream drops it within its duplicate window, so it stores each id once); two consumer seats "
    "(processes running `Inbox.handle`), each SIGKILLed twice, once after the handler's write before the "
    "commit and once at the ack after a commit, restarted after each kill; the last lives run until every "
    "effect is in and the broker holds nothing, then stop. consumers: `compete` = both consume the queue at "
    "once; `turns` (MQTT 5) = one persistent session per queue, which a second connection takes over, so "
    "the seats take turns on it (2 kills each, then one last life); `readers` (RabbitMQ streams) = a log is "
    "read, not taken: each seat reads the whole stream under its own reference and the shared inbox makes "
    "each effect once; its end state is each reference's stored offset at the last record. relay-kill: the "
    "relay process SIGKILLed right after its 25th confirm (rounds of 10), before the round's rows are "
    "removed, then run again. cut-mid-publish: the relay's publishes after its 15th held unconfirmed by the "
    "harness (the embedded broker's group commit, the fault proxy, the MQTT tap; RabbitMQ: parked client-side) "
    "and its broker connection cut at its next wait for a confirm (fault proxy reset, MQTT tap, the embedded "
    "broker's fault seam, RabbitMQ's management API); unknown outcomes are summed over the relay's rounds. "
    "JetStream's ack_wait is 2 s in these rows (what a killed process held comes back after it). refused: "
    "one row the broker refuses (unroutable destination, or the embedded broker's "
    "body above 16 MiB) among good ones: it must end in the refused table with the broker's reason. The "
    "outbox cells end with a downstream inbox draining the queue. LOST = ids with no effect row; queue at "
    "end = ready + unacked on the broker (management API, JetStream consumer info, the embedded broker's "
    "file, the MQTT tap's PUBACK count; streams: stored offsets).")
SECTION = "\n## Transactional rows"


def write_section(path: Path, rows: list[TxRow], n: int, copies: int) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"{SECTION} (issue 35; generated {when}, {n} ids per cell, {copies} published twice)"
    replace_section(path, SECTION, f"{title}\n\n{METHOD}\n\n{markdown(rows)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=N)
    parser.add_argument("--copies", type=int, default=COPIES)
    parser.add_argument("--brokers", nargs="*")
    parser.add_argument("--dbs", nargs="*")
    parser.add_argument("--faults", nargs="*")
    parser.add_argument("--write", action="store_true", help="(re)write the section of docs/scoreboard.md")
    args = parser.parse_args()
    rows = []
    for broker, db, fault in cells(args.brokers, args.dbs, args.faults):
        row = run_cell(broker, db, fault, args.n, args.copies)
        print(" | ".join(row.cells()), flush=True)
        rows.append(row)
    print(markdown(rows))
    if args.write:
        write_section(Path(__file__).resolve().parents[2] / "docs" / "scoreboard.md", rows, args.n, args.copies)
    return 0 if all(row.passed or (row.gap and not row.error) for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
