"""Run the reliability matrix and write docs/scoreboard.md and docs/scoreboard.png.

    .venv/bin/python -m tests.scoreboard.run            # full matrix
    .venv/bin/python -m tests.scoreboard.run --n 1000 --brokers embedded
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import traceback
from pathlib import Path

from ackbridge.urls import redact
from tests.scoreboard.brokers import BROKERS, BrokerEntry
from tests.scoreboard.checker import ScoreRow, failed_row, markdown, score
from tests.scoreboard.workload import Cell

DOCS = Path(__file__).resolve().parents[2] / "docs"


def run_cell(entry: BrokerEntry, fault: str, n: int) -> ScoreRow:
    try:
        harness = entry.make()
    except Exception as exc:
        return failed_row(entry.name, "consumer", fault, f"broker unavailable: {redact(str(exc))[:120]}")
    try:
        proxied = entry.proxied(harness) if entry.proxied else None
        history = Cell(harness, fault, n, proxied_url=proxied, online_consumer=entry.online_consumer,
                       max_backlog=entry.max_backlog).run()
        return score(entry.name, "consumer", fault, history)
    except Exception as exc:
        traceback.print_exc()
        return failed_row(entry.name, "consumer", fault, f"{type(exc).__name__}: {redact(str(exc))[:120]}")
    finally:
        harness.cleanup()


def run_matrix(n: int, brokers: list[str] | None = None, faults: list[str] | None = None) -> list[ScoreRow]:
    rows = []
    for entry in BROKERS:
        if brokers and entry.name not in brokers:
            continue
        for fault in entry.faults:
            if faults and fault not in faults:
                continue
            row = run_cell(entry, fault, n)
            print(" | ".join(row.cells()), flush=True)
            rows.append(row)
    return rows


def write_report(rows: list[ScoreRow], n: int) -> None:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = (f"# Reliability scoreboard\n\nGenerated {when} by `python -m tests.scoreboard.run` on {machine}; "
            f"{n} unique ids per cell. Method: docs/reliability.md.\n\n" + markdown(rows))
    (DOCS / "scoreboard.md").write_text(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    labels = [f"{r.broker}\n{r.fault}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
    ax.bar(labels, [r.duplicated for r in rows], label="duplicated", color="#f0a030")
    ax.bar(labels, [r.lost for r in rows], bottom=[r.duplicated for r in rows], label="LOST", color="#d03030")
    ax.set_ylabel("messages")
    ax.set_title(f"lost (must be 0) and duplicated per cell, {n} ids each")
    ax.legend()
    plt.xticks(rotation=45, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(DOCS / "scoreboard.png", dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--brokers", nargs="*")
    parser.add_argument("--faults", nargs="*")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = run_matrix(args.n, args.brokers, args.faults)
    if not args.no_write:
        write_report(rows, args.n)
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
