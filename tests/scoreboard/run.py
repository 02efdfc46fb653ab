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
    plot([(f"{r.broker} / {r.fault}", r.lost, r.duplicated) for r in rows], n)


def plot(cells: list[tuple[str, int, int]], n: int) -> None:
    """Horizontal bars: LOST (must be 0) and duplicated per cell."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    labels = [c[0] for c in cells][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(cells) + 1.5))
    ax.barh(labels, [c[2] for c in cells][::-1], color="#f0a030", label="duplicated (allowed, bounded)")
    ax.barh(labels, [c[1] for c in cells][::-1], left=[c[2] for c in cells][::-1], color="#d03030",
            label="LOST (must be 0)")
    ax.set_xlabel(f"messages (of {n} ids per cell)")
    ax.set_title("ackbridge reliability scoreboard: lost and duplicated per cell")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(DOCS / "scoreboard.png", dpi=110)


def replot() -> None:
    """Redraw docs/scoreboard.png from the table in docs/scoreboard.md."""
    text = (DOCS / "scoreboard.md").read_text()
    n = int(text.split(" unique ids per cell")[0].rsplit(" ", 1)[1])
    cells = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) == len(ScoreRow.HEADERS) and parts[0] not in {"broker", "---"} and parts[8].isdigit():
            cells.append((f"{parts[0]} / {parts[2]}", int(parts[8]), int(parts[10])))
    plot(cells, n)


SPARK_TESTS = "fails_once or sigkilled or connection_cut or available_now"


def run_spark_rows() -> list[dict[str, object]]:
    """Run the Spark fault tests (source role) and collect the rows they compute."""
    import json
    import subprocess
    import sys
    import tempfile

    root = Path(__file__).resolve().parents[2]
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as out:
        path = out.name
    env = dict(os.environ, ACKBRIDGE_SCOREBOARD_ROWS=path, PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/spark",
                    "-k", SPARK_TESTS], cwd=root, env=env, check=False, timeout=3600)
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def spark_markdown(rows: list[dict[str, object]]) -> str:
    columns = ["broker", "fault", "confirmed", "delivered", "LOST", "UNEXPECTED", "duplicated"]
    extra = sorted({k for r in rows for k in r} - set(columns))
    header = columns + extra + ["result"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        ok = r.get("LOST") == 0 and r.get("UNEXPECTED") == 0
        lines.append("| " + " | ".join(str(r.get(c, "-")) for c in columns + extra) + f" | {'ok' if ok else 'FAIL'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--brokers", nargs="*")
    parser.add_argument("--faults", nargs="*")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from docs/scoreboard.md")
    parser.add_argument("--spark", action="store_true",
                        help="also run the Spark fault tests and add their rows (role: Spark source)")
    parser.add_argument("--spark-only", action="store_true",
                        help="only (re)write the Spark section of docs/scoreboard.md")
    args = parser.parse_args()
    if args.replot:
        replot()
        return 0
    rows = [] if args.spark_only else run_matrix(args.n, args.brokers, args.faults)
    spark_rows = run_spark_rows() if args.spark or args.spark_only else []
    if not args.no_write:
        if args.spark_only:
            text = (DOCS / "scoreboard.md").read_text()
            (DOCS / "scoreboard.md").write_text(text.split("\n## Spark source")[0].rstrip() + "\n")
        else:
            write_report(rows, args.n)
        if spark_rows:
            with open(DOCS / "scoreboard.md", "a", encoding="utf-8") as fh:
                fh.write("\n## Spark source (settle after commit)\n\nFrom the fault tests in `tests/spark/` "
                         "(query driven by Spark, faults injected by the test; 30-150 ids per row).\n\n"
                         + spark_markdown(spark_rows))
    spark_ok = all(r.get("LOST") == 0 and r.get("UNEXPECTED") == 0 for r in spark_rows)
    return 0 if all(r.passed for r in rows) and spark_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
