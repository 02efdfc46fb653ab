"""Handler mode before and after it left the I/O thread, in the same run (not a test).

    .venv/bin/python benchmarks/handler_mode_bench.py --before 8b2475b --n 50000 --rounds 3

Until issue 32 a handler consumer ran its handler inline on the transport's I/O
thread (no hand-off, and a slow handler starved heartbeats and acks); now it runs
on a thread of its own. This fills a RabbitMQ queue, then drains it with
``consume(handler=...)`` (ack per delivery, conflated every 100 or 50 ms) in a new
process per side and round, alternating: the code at ``--before`` (a temporary git
worktree, imported through PYTHONPATH) and the working tree. Each side reports
messages per second (first delivery to last ack) and CPU per message (the child's
user + system time over the drain). The ``get()`` loop on the working tree is
printed for reference. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
URL = "amqp://guest:guest@127.0.0.1:5672/"

CHILD = r"""
import json, resource, sys, threading, time
import ackbridge

url, queue, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
done = threading.Event()
count = 0
first = [0.0]

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

with ackbridge.connect(url, prefetch=200) as conn:
    cpu0 = cpu()
    if mode == "handler":
        def handler(delivery):
            global count
            if count == 0:
                first[0] = time.perf_counter()
            delivery.ack()
            count += 1
            if count >= n:
                done.set()
        consumer = conn.consume(queue, handler=handler, conflate_count=100, conflate_ms=50)
        done.wait(600)
    else:
        consumer = conn.consume(queue, conflate_count=100, conflate_ms=50)
        for delivery in consumer:
            if count == 0:
                first[0] = time.perf_counter()
            delivery.ack()
            count += 1
            if count >= n:
                break
    consumer.flush()
    elapsed = time.perf_counter() - first[0]
    used = cpu() - cpu0
    consumer.close()
print(json.dumps({"rate": count / elapsed, "cpu_us": used / count * 1e6, "count": count,
                  "module": ackbridge.__file__}))
"""


def worktree(rev: str, where: Path) -> Path:
    """A checkout of *rev* and a folder of links that puts its packages first on sys.path."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach", str(where / "tree"), rev],
                   check=True, capture_output=True)
    path = where / "path"
    path.mkdir()
    tree = where / "tree"
    (path / "ackbridge").symlink_to(tree / "ackbridge")
    for package in (tree / "plugins").glob("*/ackbridge_*"):
        (path / package.name).symlink_to(package)
    return path


def fill(queue: str, n: int) -> None:
    import ackbridge

    with ackbridge.connect(URL) as conn:
        conn.declare_queue(queue, dead_letter=False)
        publisher = conn.publisher(window=2000)
        for i in range(n):
            publisher.publish(queue, b"x" * 256, message_id=str(i))
        publisher.flush()


def drain(queue: str, n: int, mode: str, pythonpath: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", CHILD, URL, queue, str(n), mode], env=env, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=900)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="8b2475b", help="git revision with the inline handler")
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import ackbridge

    queue = f"bench-handler-{uuid.uuid4().hex[:8]}"
    sides: dict[str, list[dict[str, float]]] = {"before (inline)": [], "after (handler thread)": [],
                                                "after, get() loop": []}
    with tempfile.TemporaryDirectory() as tmp:
        before = worktree(args.before, Path(tmp))
        try:
            for round_no in range(args.rounds):
                for side, mode, path in (("before (inline)", "handler", before),
                                         ("after (handler thread)", "handler", None),
                                         ("after, get() loop", "get", None)):
                    fill(queue, args.n)
                    got = drain(queue, args.n, mode, path)
                    sides[side].append(got)
                    print(f"round {round_no + 1} {side:<24} {got['rate']:>8.0f} msgs/s  "
                          f"{got['cpu_us']:>6.1f} us CPU/msg  ({Path(str(got['module'])).parent})", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "tree")],
                           capture_output=True)
            with ackbridge.connect(URL) as conn:
                conn.delete_queue(queue, dead_letter=False)
    base = sides["before (inline)"]
    print(f"\n{args.n} x 256 B, prefetch 200, ack per delivery conflated (100 / 50 ms), {args.rounds} rounds, medians:")
    for side, runs in sides.items():
        rate_ratio = statistics.median(r["rate"] / b["rate"] for r, b in zip(runs, base, strict=True))
        cpu_ratio = statistics.median(r["cpu_us"] / b["cpu_us"] for r, b in zip(runs, base, strict=True))
        print(f"  {side:<24} {statistics.median(r['rate'] for r in runs):>8.0f} msgs/s "
              f"{statistics.median(r['cpu_us'] for r in runs):>6.1f} us CPU/msg   "
              f"vs before: rate x{rate_ratio:.2f}, CPU x{cpu_ratio:.2f}")


if __name__ == "__main__":
    main()
