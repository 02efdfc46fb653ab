"""`ackbridge demo --url amqp://...`: the README's main job pointed at RabbitMQ (a subprocess, as a user runs it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.core.test_cli import run

from .harness import delete_exchange, delete_queue, queue_counts


def test_demo_on_rabbitmq_settles_every_message(tmp_path: Path) -> None:
    result = run("demo", "-n", "300", "--url", "amqp://guest:guest@127.0.0.1:5672/", cwd=tmp_path)
    named = re.search(r"queue (ackbridge-demo-[0-9a-f]+) \(and its dead-letter queue\)", result.stdout)
    try:
        assert result.returncode == 0, result.stderr + result.stdout
        assert named, result.stdout
        rows = [[int(x) for x in re.findall(r"\d+", line)] for line in result.stdout.splitlines()
                if line.startswith("│") and re.search(r"\d", line)]
        # published, confirmed, written, settled, redelivered, duplicates, lost, spark-committed acks
        assert rows == [[300, 300, 300, 300, 0, 0, 0, 300]], result.stdout
        # Checked on the broker after Spark stopped, not taken from the source's own count.
        assert "settled = confirmed - what a fresh consumer still found on the queue" in result.stdout
        assert queue_counts()[named.group(1)] == (0, 0)
        assert "guest:guest" not in result.stdout + result.stderr
    finally:
        if named:
            delete_queue(named.group(1))
            delete_queue(f"{named.group(1)}.dlq")
            delete_exchange(f"{named.group(1)}.dlx")
