"""Run the asyncio rows (RabbitMQ classic and quorum x both asyncio transports: consumer
faults and publisher rows) and (re)write their section of docs/scoreboard.md.

    .venv/bin/python -m tests.scoreboard.async_scoreboard --n 2000 --write
    .venv/bin/python -m tests.scoreboard.async_scoreboard --n 300 --faults connection-cut --modes plain
    .venv/bin/python -m tests.scoreboard.async_scoreboard --n 2000 --restart --write   # stops RabbitMQ: alone
"""

from __future__ import annotations

import argparse
import datetime
import traceback
from pathlib import Path

from ackbridge.urls import redact
from tests.scoreboard import async_publisher
from tests.scoreboard import publisher_rows as pub
from tests.scoreboard.async_brokers import ASYNC_BROKERS, AsyncBrokerEntry
from tests.scoreboard.async_workload import AsyncCell
from tests.scoreboard.checker import ScoreRow, failed_row, markdown, replace_section, score

DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADING = "\n## Asyncio transports (RabbitMQ)"
METHOD = (
    "From `python -m tests.scoreboard.async_scoreboard` (`async_workload.py`, `async_publisher.py`; CI runs "
    "one consumer fault and one publisher row per asyncio transport on a few hundred ids: "
    "`tests/scoreboard/test_async_rows.py`). The same cells as above, driven through `ackbridge.connect_async` "
    "with `asyncio_transport=threaded` (pika on its I/O thread) or `asyncio_transport=aio-pika` (on the "
    "caller's loop); same ids, fault points, checker and scoring (LOST = confirmed never delivered, "
    "UNEXPECTED = delivered never attempted, both 0). A connection-cut is RabbitMQ's `close_connection` "
    "for the consumer rows and the fault seam's sever for the publisher rows; the publisher rows' consumer "
    "is the sync one (its own connection). The broker-restart publisher rows stop the shared RabbitMQ: "
    "they run alone (`--restart`) and have a section of their own below.")
RESTART_HEADING = "\n## Asyncio publisher rows: broker restart (RabbitMQ)"
RESTART_METHOD = (
    "From `python -m tests.scoreboard.async_scoreboard --restart`, run alone (it stops the shared RabbitMQ). "
    "The sync publisher rows' restart (`rabbitmqctl stop_app`, 2 s down, `start_app`) hits while confirms are "
    "pending; the publisher is awaited through `ackbridge.connect_async` on each asyncio transport and goes on "
    "publishing (paced) through the outage; the consumer is the sync one. Scoring as in the publisher rows.")


def run_consumer_cell(entry: AsyncBrokerEntry, fault: str, n: int) -> ScoreRow:
    try:
        harness = entry.make()
    except Exception as exc:
        return failed_row(entry.name, "consumer", fault, f"broker unavailable: {redact(str(exc))[:120]}")
    try:
        cell = AsyncCell(harness, fault, n, proxied_url=entry.proxied(harness),
                         options={"asyncio_transport": entry.asyncio_transport})
        history = cell.run()
        if cell.transports != {entry.asyncio_transport}:
            return failed_row(entry.name, "consumer", fault, f"ran on {sorted(cell.transports)}")
        return score(entry.name, "consumer", fault, history)
    except Exception as exc:
        traceback.print_exc()
        return failed_row(entry.name, "consumer", fault, f"{type(exc).__name__}: {redact(str(exc))[:120]}")
    finally:
        harness.cleanup()


def write_section(path: Path, consumer_rows: list[ScoreRow], publisher_rows: list[pub.PublisherRow],
                  n: int) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    # The shared rule excuses refused ids (final, told to the application). RabbitMQ never refuses a
    # publish to a queue that exists: a refusal on a cut is the transport's misreport, shown here.
    refused = [f"{r.broker} {r.mode}: {r.refused}" for r in publisher_rows if r.refused]
    warning = (f"\nRefused on a cut (counted as refused, never sent again, never delivered; the CI tier fails "
               f"on them): {'; '.join(refused)}. Confirms pending at the cut that the transport reported "
               f"REFUSED instead of unknown (issue 38).\n" if refused else "")
    text = (f"{HEADING} (issue 38; generated {when}, {n} ids per cell)\n\n{METHOD}\n\n"
            f"Consumer faults:\n\n{markdown(consumer_rows)}\nPublisher rows:\n\n{pub.markdown(publisher_rows)}"
            f"{warning}")
    replace_section(path, HEADING, text)


def write_restart_section(path: Path, publisher_rows: list[pub.PublisherRow], n: int) -> None:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = (f"{RESTART_HEADING} (issue 38; generated {when}, {n} ids per cell)\n\n{RESTART_METHOD}\n\n"
            f"{pub.markdown(publisher_rows)}")
    replace_section(path, RESTART_HEADING, text)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--brokers", nargs="*")
    parser.add_argument("--faults", nargs="*", help="consumer faults (publisher rows: connection-cut)")
    parser.add_argument("--modes", nargs="*", help="publisher modes (plain, retransmit)")
    parser.add_argument("--no-publisher", action="store_true")
    parser.add_argument("--restart", action="store_true",
                        help="only the broker-restart publisher rows (stops the shared RabbitMQ: run alone)")
    parser.add_argument("--write", action="store_true", help="(re)write the asyncio section of docs/scoreboard.md")
    args = parser.parse_args()
    if args.restart:
        return restart_rows(args.n, args.brokers, args.modes, args.write)
    rows: list[ScoreRow] = []
    for entry in ASYNC_BROKERS:
        if args.brokers and entry.name not in args.brokers:
            continue
        for fault in entry.faults:
            if args.faults and fault not in args.faults:
                continue
            row = run_consumer_cell(entry, fault, args.n)
            print(" | ".join(row.cells()), flush=True)
            rows.append(row)
    pub_rows = []
    for broker, fault, mode in ([] if args.no_publisher else async_publisher.cells(args.brokers, args.modes)):
        pub_row = async_publisher.run_cell(broker, fault, mode, args.n)
        print(" | ".join(pub_row.cells()), flush=True)
        pub_rows.append(pub_row)
    print(markdown(rows))
    print(pub.markdown(pub_rows))
    if args.write:
        write_section(DOCS / "scoreboard.md", rows, pub_rows, args.n)
    return 0 if all(r.passed for r in rows) and all(r.passed for r in pub_rows) else 1


def restart_rows(n: int, brokers: list[str] | None, modes: list[str] | None, write: bool) -> int:
    rows = []
    for broker, fault, mode in async_publisher.cells(brokers, modes, faults=("broker-restart",)):
        row = async_publisher.run_cell(broker, fault, mode, n)
        print(" | ".join(row.cells()), flush=True)
        rows.append(row)
    print(pub.markdown(rows))
    if write:
        write_restart_section(DOCS / "scoreboard.md", rows, n)
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
