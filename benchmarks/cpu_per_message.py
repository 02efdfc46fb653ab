"""CPU per message: ackbridge against the raw client doing the same work, every plugin, both faces.

Not a test: prints figures from one run. The figure is the process CPU time
(``time.process_time()``: every thread of this process, the client's I/O threads
included; the broker is another process) spent over a side's timed section,
divided by the messages it handled, in microseconds. CPU time moves less with
the machine's other work than wall time does; msgs/s (wall) is shown too.

Rows (benchmarks/cpu_rows.py): publish with confirms and consume with acks, the
sync and the asyncio face, for RabbitMQ (raw: pika SelectConnection; aio-pika for
the asyncio face), MQTT QoS 1 (paho, 100 B bodies as in mqtt_bench.py), AMQP 1.0
(python-qpid-proton), NATS JetStream (nats-py; consume by hand-made pull requests,
as the plugin pulls), RabbitMQ streams (rstream) and the embedded broker (raw:
sqlite3 doing the same inserts and deletes). One face's raw client serves as the
other's where the client has one face only (paho, proton, rstream, nats-py).

Each round runs every row's two sides back to back (ackbridge first in even
rounds, raw first in odd ones); the figures are medians over rounds, the ratio
the median of per-round ratios (ackbridge CPU / raw CPU: above 1, ackbridge
spends more per message).

    .venv/bin/python benchmarks/cpu_per_message.py --n 20000 --rounds 3 --markdown
    .venv/bin/python benchmarks/cpu_per_message.py --only nats,embedded
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from cpu_clock import CLOCK, Sample
from cpu_rows import SUITES, Row

HERE = os.path.dirname(os.path.abspath(__file__))
#: instructions.py groups that count rows of these plugins (``--instructions``).
INSTRUCTION_GROUPS = {"rabbitmq": "rabbitmq", "mqtt": "mqtt", "amqp10": "amqp10", "nats": "nats", "embedded": "core",
                      "streams": "streams"}


@dataclass
class Result:
    row: Row
    ackbridge: list[Sample] = field(default_factory=list)
    raw: list[Sample] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [a.cpu / r.cpu for a, r in zip(self.ackbridge, self.raw, strict=True)]


def _median(samples: list[Sample], attr: str) -> float:
    return float(statistics.median(getattr(s, attr) for s in samples))


def run_suite(name: str, n: int, rounds: int) -> list[Result]:
    with SUITES[name](n) as rows:
        results = [Result(row) for row in rows]
        for round_no in range(rounds):
            for result in results:
                sides = [("ackbridge", result.row.ackbridge), ("raw", result.row.raw)]
                for label, work in sides if round_no % 2 == 0 else sides[::-1]:
                    if work is None:
                        continue
                    sample = CLOCK.measure(work, n)
                    getattr(result, label).append(sample)
                    print(f"  round {round_no + 1} {result.row.name}: {label} {sample.us_per_message:.1f} us/msg, "
                          f"{sample.rate:,.0f} msgs/s", file=sys.stderr, flush=True)
    return results


def text_line(result: Result) -> str:
    ab = f"{_median(result.ackbridge, 'us_per_message'):8.1f} us/msg {_median(result.ackbridge, 'rate'):9,.0f}/s"
    if not result.raw:
        return f"{result.row.name:46} ackbridge {ab}   ({result.row.raw_name or 'no raw side'})"
    ratios = result.ratios()
    return (f"{result.row.name:46} ackbridge {ab}   {result.row.raw_name} "
            f"{_median(result.raw, 'us_per_message'):8.1f} us/msg {_median(result.raw, 'rate'):9,.0f}/s   "
            f"rounds {min(ratios):.2f}..{max(ratios):.2f}   median ratio {statistics.median(ratios):.2f}")


def markdown_table(results: list[Result]) -> str:
    lines = ["| row | ackbridge us/msg | raw us/msg (client) | ratio (rounds) | msgs/s ackbridge / raw |",
             "|---|---:|---:|---:|---:|"]
    for result in results:
        ab_us, ab_rate = _median(result.ackbridge, "us_per_message"), _median(result.ackbridge, "rate")
        if not result.raw:
            lines.append(f"| {result.row.name} | {ab_us:.1f} | - ({result.row.raw_name or 'no raw side'}) | - "
                         f"| {ab_rate:,.0f} / - |")
            continue
        ratios = result.ratios()
        lines.append(f"| {result.row.name} | {ab_us:.1f} | {_median(result.raw, 'us_per_message'):.1f} "
                     f"({result.row.raw_name}) | {statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f})"
                     f" | {ab_rate:,.0f} / {_median(result.raw, 'rate'):,.0f} |")
    return "\n".join(lines)


def instruction_counts(suites: list[str]) -> str:
    """Run benchmarks/instructions.py for the groups it has of *suites* and return its printout."""
    groups = [INSTRUCTION_GROUPS[s] for s in suites if s in INSTRUCTION_GROUPS]
    if not groups:
        return ""
    done = subprocess.run([sys.executable, os.path.join(HERE, "instructions.py"), "--rows", ",".join(groups)],
                          capture_output=True, text=True, timeout=7200, check=False)
    if done.returncode:
        return f"instructions.py failed (rc {done.returncode}):\n{done.stderr[-2000:]}"
    return done.stdout


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="messages per side per round (256 B; MQTT 100 B)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds; medians over them")
    parser.add_argument("--only", default=",".join(SUITES),
                        help=f"plugins to run, comma-separated, of: {', '.join(SUITES)}")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--instructions", action="store_true",
                        help="also run benchmarks/instructions.py (valgrind, slow) for the rows it covers")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.only if s not in SUITES]
    if unknown:
        parser.error(f"unknown plugin(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    if args.n < 2 or args.rounds < 1:
        parser.error("--n must be at least 2 and --rounds at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # Benchmark queues have no dead-letter companions: consume() would say so every time.
    logging.getLogger("ackbridge").setLevel(logging.ERROR)
    started = time.monotonic()
    results: list[Result] = []
    for name in args.only:
        results += run_suite(name, args.n, args.rounds)
    print(f"CPU per message (process CPU time, all threads), N={args.n:,} per side per round, {args.rounds} "
          f"alternated rounds, medians; ran {time.monotonic() - started:.0f} s; load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(markdown_table(results) if args.markdown else "\n".join(text_line(r) for r in results))
    if args.instructions:
        print(instruction_counts(args.only))


if __name__ == "__main__":
    main()
