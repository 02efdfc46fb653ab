"""The embedded broker across processes: leases return when their consumer dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import ackbridge
from ackbridge.testing import eventually
from ackbridge.testing.processes import reap
from tests.local.harness import LocalHarness

HOLDER = textwrap.dedent("""
    import sys, time, ackbridge
    conn = ackbridge.connect(sys.argv[1])
    consumer = conn.consume(sys.argv[2], prefetch=int(sys.argv[3]))
    got = []
    while len(got) < int(sys.argv[3]):
        d = consumer.get(timeout=30)
        got.append(d)
    print("holding", len(got), flush=True)
    time.sleep(600)   # killed long before this ends
""")


def test_sigkilled_consumer_leases_return_to_another_process(tmp_path: Path) -> None:
    harness = LocalHarness(tmp_path)
    queue = harness.new_queue()
    url = harness.url()
    with ackbridge.connect(url) as conn:
        for i in range(10):
            conn.publish(queue, f"m{i}".encode(), message_id=f"m{i}")
        assert conn.flush(timeout=30)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url, queue, "6"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding 6"
        assert harness.unacked(queue) == 6 and harness.ready(queue) == 4
    finally:
        reap(holder, sig=signal.SIGKILL)  # the kill under test; waits, closes its stdout pipe
    # Another process (this one) receives every message, the six held ones redelivered.
    with ackbridge.connect(url) as conn:
        consumer = conn.consume(queue, prefetch=20)
        seen = {}
        while len(seen) < 10:
            d = consumer.get(timeout=30)
            assert d is not None, f"only {sorted(seen)} came back"
            seen[d.message_id] = (d.redelivered, d.delivery_count)
            d.ack()
    assert sum(1 for redelivered, count in seen.values() if redelivered and count == 2) == 6
    eventually(lambda: harness.ready(queue) == 0 and harness.unacked(queue) == 0)
    harness.cleanup()


def test_two_processes_share_one_queue_without_double_delivery(tmp_path: Path) -> None:
    harness = LocalHarness(tmp_path)
    queue = harness.new_queue()
    url = harness.url()
    with ackbridge.connect(url) as conn:
        for i in range(400):
            conn.publish(queue, f"m{i}".encode(), message_id=f"m{i}")
        assert conn.flush(timeout=60)
    script = textwrap.dedent("""
        import sys, ackbridge
        with ackbridge.connect(sys.argv[1]) as conn:
            c = conn.consume(sys.argv[2], prefetch=16)
            while (d := c.get(timeout=3)) is not None:
                print(d.message_id, flush=True); d.ack()
    """)
    workers = [subprocess.Popen([sys.executable, "-c", script, url, queue], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        outputs = [w.communicate(timeout=120)[0].split() for w in workers]
    finally:
        for worker in workers:
            reap(worker)  # exited already, unless communicate() timed out
    everything = outputs[0] + outputs[1]
    assert sorted(everything) == sorted(f"m{i}" for i in range(400))
    assert harness.ready(queue) == 0 and harness.unacked(queue) == 0
    harness.cleanup()
