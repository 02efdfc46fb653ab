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
from tests.scoreboard.checker import ScoreRow, failed_row, markdown, replace_section, score
from tests.scoreboard.workload import Cell

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: The figure line of docs/scoreboard.md: write_report rewrites the page from scratch and keeps it.
FIGURE = "![Reliability scoreboard: losses per broker and fault](scoreboard.png)"


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
            f"{n} unique ids per cell. Method: docs/reliability.md.\n\n{FIGURE}\n\n" + markdown(rows))
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
    ax.set_xscale("symlog", linthresh=10)  # a refused sink row's retries duplicate thousands
    ax.set_xlabel(f"messages, symlog (consumer cells: {n} ids; Spark cells: >= 1000 ids)")
    ax.set_title("ackbridge reliability scoreboard: lost and duplicated per cell")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(DOCS / "scoreboard.png", dpi=110)


def replot() -> None:
    """Redraw docs/scoreboard.png from the tables in docs/scoreboard.md (consumer matrix and Spark sections)."""
    text = (DOCS / "scoreboard.md").read_text()
    n = int(text.split(" unique ids per cell")[0].rsplit(" ", 1)[1])
    cells = []
    section, columns = "", []
    for line in text.splitlines():
        if line.startswith("## "):
            section, columns = line[3:].split(" (")[0].lower(), []
            continue
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if not line.startswith("|") or parts[0] == "---":
            continue
        if parts[0] == "broker":
            columns = parts
            continue
        if section.startswith("spark") and columns:
            row = dict(zip(columns, parts, strict=False))
            lost, dup = row.get("LOST", "-"), row.get("duplicated", "-")
            cells.append((f"{section}: {row['broker']} / {row['fault']}", int(lost) if lost.isdigit() else 0,
                          int(dup) if dup.isdigit() else 0))
        elif len(parts) == len(ScoreRow.HEADERS) and parts[8].isdigit():
            cells.append((f"{parts[0]} / {parts[2]}", int(parts[8]), int(parts[10])))
    plot(cells, n)


SPARK_TESTS = ("fails_once or sigkilled or connection_cut or available_now or refused_publish_then "
               "or cut_mid_write or task_fails_after "
               # the exactly-once rows (role "spark exactly-once"): tests/spark/test_exactly_once.py and the
               # NATS fetch=executors kill; test_rabbitmq_restart stops and starts the shared RabbitMQ
               "or sigkill_before_commit or sigkill_between_commit_and_ack or rabbitmq_restart "
               "or driver_sigkill_mid_batch_then_restart")


def run_spark_rows() -> list[dict[str, object]]:
    """Run the Spark fault tests in the scoreboard tier (every broker, >= 1000 ids per cell)
    and collect the rows they compute; a cell without a row becomes a failing row."""
    import json
    import subprocess
    import sys
    import tempfile

    root = Path(__file__).resolve().parents[2]
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as out:
        path = out.name
    env = dict(os.environ, ACKBRIDGE_SCOREBOARD_ROWS=path, ACKBRIDGE_SPARK_TIER="scoreboard",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/spark",
                    "-k", SPARK_TESTS], cwd=root, env=env, check=False, timeout=4 * 3600)
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    os.unlink(path)
    return complete_spark_rows(rows)


def complete_spark_rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """One row per cell: a test's failure row replaces its counts; missing cells and
    declared gaps become failing rows."""
    from tests.spark.cells import BROKERS, DECLARED_GAPS, SINK_FAULTS, SOURCE_FAULTS, cells

    merged: dict[tuple[str, str, str], dict[str, object]] = {}
    for row in rows:
        key = (str(row["broker"]), str(row.get("role", "spark source")), str(row["fault"]))
        if "error" in row or key not in merged:
            merged[key] = dict(merged.get(key, {}), **row)
    for role in ("spark source", "spark sink"):
        for broker, fault in cells(role):
            key = (broker, role, fault)
            if key not in merged:
                gap = DECLARED_GAPS.get((broker, fault))
                merged[key] = ({"broker": broker, "role": role, "fault": fault, "gap": gap} if gap else
                               {"broker": broker, "role": role, "fault": fault,
                                "error": "no row: the test did not run (see the pytest output)"})
    order = {f: i for i, f in enumerate(SOURCE_FAULTS + SINK_FAULTS)}
    brokers = {b: i for i, b in enumerate(BROKERS)}
    return sorted(merged.values(), key=lambda r: (order.get(str(r["fault"]), 99), str(r["fault"]),
                                                  brokers.get(str(r["broker"]), 99)))


def spark_ok(row: dict[str, object]) -> bool:
    # A declared gap (the broker cannot exhibit the fault, and its capability table
    # says so) is shown as such, not as a pass and not as a silent skip; it does
    # not fail the run. A cell that should run and has no row does.
    if "gap" in row and "error" not in row:
        return True
    return "error" not in row and row.get("LOST") == 0 and row.get("UNEXPECTED") == 0


def spark_markdown(rows: list[dict[str, object]]) -> str:
    columns = ["broker", "fault", "attempted", "confirmed", "delivered", "LOST", "UNEXPECTED",
               "duplicated"]
    extra = sorted({k for r in rows for k in r} - set(columns) - {"role", "error", "gap", "nodeid", "injections"})
    header = columns + extra + ["result"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if "gap" in r and "error" not in r:
            result = f"DECLARED GAP: {r['gap']}"
        else:
            result = "ok" if spark_ok(r) else f"FAIL {r.get('error', '')}".strip()
        lines.append("| " + " | ".join(str(r.get(c, "-")) for c in columns + extra) + f" | {result} |")
    return "\n".join(lines) + "\n"


SPARK_SOURCE_METHOD = (
    "From the fault tests in `tests/spark/` (test_source.py, test_driver_kill.py), run by "
    "`python -m tests.scoreboard.run --spark` in the scoreboard tier (`ACKBRIDGE_SPARK_TIER=scoreboard`: every "
    "broker, >= 1000 ids per cell; CI runs the same tests on 30-150 ids and fewer brokers, see "
    "`tests/spark/cells.py`). Unique ids are published with confirms before the query starts; Spark drives the "
    "query; the test injects the fault: the foreachBatch function raises in batch 0 and the query is restarted "
    "from its checkpoint (plain, or with `writeAheadPath`); the driver process group is SIGKILLed inside "
    "batch 2 and a new driver resumes from the checkpoint (AvailableNow); the source's connection is cut "
    "while batch 1 is being written (`rabbitmqctl close_connection` of the query's own connections, "
    "found by peer port behind a FaultProxy; the MQTT packet tap or a FaultProxy reset; the embedded "
    "broker severs its in-process connection). delivered = ids the foreachBatch sink saw, counted by "
    "tests/scoreboard/checker.py; afterwards the queue must be empty and settled. stale_refused / "
    "dropped_stale are the source's counters (acks of a dead connection refused; buffered deliveries of "
    "it dropped); redelivered = rows flagged redelivered by the broker. Duplicate bound: a fault replays at "
    "most the batch in flight when it hit (SIGKILL: the n // 6 = 166-row batch at 1000 ids; connection cut: "
    "the 200-row batch being written; foreachBatch failure: batch 0, and MQTT 3.1.1 with writeAheadPath, "
    "whose messages carry no id to match a redelivery, counts its 20 redelivered rows as duplicates). "
    "rabbitmq-streams rows: the executor-side stream source (tests/spark/test_stream_exactly_once.py), "
    "source -> Spark's Parquet file sink with no dedupe step, job_exactly_once.py SIGKILLed with its process "
    "group mid-batch (two streams, 1000 ids each, a task blocked in a planned batch) or between a batch's "
    "commit and its offset store (trigger 20 s), restarted with AvailableNow; delivered = ids in the files the "
    "sink committed, duplicated = extra copies there (must be 0: exactly-once by deterministic "
    "replay); afterwards the broker must store each stream's end for the query's consumerReference.")
SPARK_SINK_METHOD = (
    "From `tests/spark/test_sink_faults.py` (batch writes, `local[2,4]`: Spark retries a task up to 4 times; "
    "2 partitions; each row carries its id as message id and body). A plain consumer drains the queue "
    "while Spark writes and until it is quiet. attempted = confirmed = the rows of the write that succeeded "
    "(what the sink reported written); delivered = unique ids drained; duplicated = extra copies (a retried "
    "task republishes its rows with the same ids). Faults: a row the broker refuses (embedded: body over "
    "max_message_bytes; RabbitMQ: mandatory publish to an unroutable key, Basic.Return; MQTT 5: PUBLISH "
    "to `$SYS/...`, PUBACK 0x87) fails its task on every attempt and the write, then the fixed rows are "
    "written again; the connection is reset after a byte budget by a FaultProxy (embedded: "
    "`testSeverAfterRows`); each task's first attempt raises after its first quarter of rows was "
    "confirmed (`testFailAfterRows`). Duplicate bound: each failed task attempt republishes at most its "
    "partition (500 rows), and a refused write is written again whole (1000): a refused cell (4 failed "
    "attempts of one partition, its other partition once, then the rewrite) stays at or under "
    "4 x 500 + 500 + 1000 - 1000 unique = 2500; a cut or failed task, under 500 per retried attempt.")

SPARK_EXACTLY_ONCE_METHOD = (
    "From `tests/spark/test_exactly_once.py` (and, for the `fetch=executors` row, "
    "`tests/spark/test_jetstream_fetch.py::test_driver_sigkill_mid_batch_then_restart_loses_nothing`), run by "
    "`python -m tests.scoreboard.run --spark` in the scoreboard tier (every broker; CI runs each fault once, on "
    "the embedded broker or RabbitMQ). The recipe of docs/spark.md: messages with ids, "
    "`dropDuplicatesWithinWatermark` on `message_id`, Spark's Parquet file sink; the job "
    "(`tests/spark/job_exactly_once.py`, 600 ids published with confirms before it starts) runs as its own "
    "driver process, the fault hits, and a new driver restarts from the checkpoint with AvailableNow. Faults: "
    "the driver's process group SIGKILLed while a task of a planned batch is blocked (before its commit); "
    "SIGKILLed after batch 0 committed and before its ack (a 20 s trigger holds the ack; the broker still holds "
    "all 600); the source's connection cut (RabbitMQ: `rabbitmqctl close_connection` through a proxy; "
    "embedded: the source severs itself after batch 2); `rabbitmqctl stop_app` / `start_app` under the running "
    "query. delivered = unique ids in the files the sink's `_spark_metadata` log committed; duplicated = extra "
    "copies there (must be 0); afterwards the queue must be empty and settled.")
SPARK_SECTIONS = (("## Spark source (settle after commit)", "spark source", SPARK_SOURCE_METHOD),
                  ("## Spark sink (publish with confirms)", "spark sink", SPARK_SINK_METHOD),
                  ("## Spark exactly-once (message ids + dropDuplicatesWithinWatermark)", "spark exactly-once",
                   SPARK_EXACTLY_ONCE_METHOD))


def write_spark_sections(path: Path, spark_rows: list[dict[str, object]]) -> None:
    """Put each Spark section with rows into *path*, replacing its earlier copy in place (or
    appending it) and keeping every other section."""
    for heading, role, method in SPARK_SECTIONS:
        rows = [r for r in spark_rows if r.get("role", "spark source") == role]
        if rows:
            replace_section(path, heading, f"\n{heading}\n\n{method}\n\n{spark_markdown(rows)}")


APPLICATION_HEADING = "## Faults that applications cause"
APPLICATION_METHOD = (
    "From `tests/application_faults/` (each module's `row_*` function; CI runs each fault on one broker). "
    "Slow handler: a handler taking 0.4 s per delivery with 10 prefetched and 1 s heartbeats (AMQP 1.0: 40 "
    "and 4 s), so one prefetched batch outlasts three heartbeats; delivered = ids the handler saw, duplicated "
    "= ids it saw again (a lost ack); must be 0. Shutdown signals: a child process consumes 400 ids with 200 "
    "prefetched inside `process()` and is stopped while it holds one (SIGINT; SIGTERM with and without an "
    "exiting handler; `sys.exit` in the work; the asyncio twins); delivered = ids it processed plus those "
    "drained afterwards; dead-lettered must be 0. Competing consumers: two consumers with `dedupe_window` on "
    "one queue while the publisher's connection is cut twice with confirms pending; duplicated = copies of a "
    "retransmitted publish handed to the application by the other consumer, declared and bounded by the "
    "retransmits (an inbox makes it 0). NATS ack_wait: `ack_wait` 1 s, shorter than the handler, with "
    "`dedupe_window`, the first delivery requeued after the redelivery arrived; nothing may be lost.")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--brokers", nargs="*")
    parser.add_argument("--faults", nargs="*")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from docs/scoreboard.md")
    parser.add_argument("--spark", action="store_true",
                        help="also run the Spark fault tests (scoreboard tier: every broker, >= 1000 ids per cell; "
                             "stops and starts the shared RabbitMQ once) and (re)write the Spark source, sink and "
                             "exactly-once sections")
    parser.add_argument("--spark-only", action="store_true",
                        help="only run the Spark fault tests and (re)write the Spark sections of "
                             "docs/scoreboard.md, keeping the rest")
    parser.add_argument("--embedded", action="store_true",
                        help="only run the embedded broker's own fault rows (paused consumer x20, disk full, "
                             "damaged file, ...) and (re)write their section of docs/scoreboard.md")
    parser.add_argument("--embedded-repeats", type=int, help="run each embedded row this many times instead")
    parser.add_argument("--application", action="store_true",
                        help="only run the application-fault rows (slow handler, shutdown signals, competing "
                             "consumers, ack deadlines) over their brokers and (re)write their section")
    args = parser.parse_args()
    if args.replot:
        replot()
        return 0
    if args.application:
        from tests.application_faults.grid import NOT_APPLICABLE, run_application_rows

        app_rows = run_application_rows(args.brokers)
        if not args.no_write:
            when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
            gaps = "".join(f"- {fault}: {why}\n" for fault, why in NOT_APPLICABLE.items())
            replace_section(DOCS / "scoreboard.md", APPLICATION_HEADING,
                            f"{APPLICATION_HEADING}\n\nGenerated {when} by `python -m tests.scoreboard.run "
                            f"--application`. {APPLICATION_METHOD}\n\n{markdown(app_rows)}\nWhere each fault "
                            f"runs:\n\n{gaps}")
        return 0 if all(r.passed for r in app_rows) else 1
    if args.embedded:
        from tests.scoreboard import embedded

        embedded_rows = embedded.run_embedded(args.n, args.faults, args.embedded_repeats)
        if not args.no_write:
            when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
            embedded.write_section(DOCS / "scoreboard.md", embedded_rows, when)
        return 0 if all(r.passed for r in embedded_rows) else 1
    rows = [] if args.spark_only else run_matrix(args.n, args.brokers, args.faults)
    spark_rows = run_spark_rows() if args.spark or args.spark_only else []
    if not args.no_write:
        if not args.spark_only:
            write_report(rows, args.n)
        if spark_rows:
            write_spark_sections(DOCS / "scoreboard.md", spark_rows)
            replot()  # the PNG shows the Spark cells too
    return 0 if all(r.passed for r in rows) and all(spark_ok(r) for r in spark_rows) else 1

if __name__ == "__main__":
    raise SystemExit(main())
