"""`ackbridge demo --url amqp://...`: the README's main job pointed at RabbitMQ (a subprocess, as a user runs it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.core.test_cli import run

from .harness import delete_exchange, delete_queue, queue_counts


def test_demo_on_rabbitmq_settles_every_message(tmp_path: Path) -> None:
    result = run("demo", "-n", "300", "--url", "amqp://guest:guest@127.0.0.1:5672/", cwd=tmp_path)
    named = re.search(r"queue (ackbridge-demo-[0-9a-f]+)", result.stdout)
    try:
        assert result.returncode == 0, result.stderr + result.stdout
        assert named, result.stdout
        rows = dict(re.findall(r"^│ ([a-z -]+?)\s+│\s+(\d+) │", result.stdout, re.M))
        assert rows == {"published": "300", "confirmed": "300", "written": "300", "settled": "300",
                        "redelivered": "0", "duplicates": "0", "lost": "0", "spark-committed acks": "300"}, rows
        # Checked on the broker after Spark stopped, not taken from the source's own count.
        assert "settled = confirmed - what a fresh consumer still found on the queue" in result.stdout
        # The demo deletes what it declared (issue 16): the queue and its dead-letter companion are gone.
        left = queue_counts()
        assert named.group(1) not in left and f"{named.group(1)}.dlq" not in left, sorted(left)
        assert "guest:guest" not in result.stdout + result.stderr
    finally:
        if named:
            delete_queue(named.group(1))
            delete_queue(f"{named.group(1)}.dlq")
            delete_exchange(f"{named.group(1)}.dlx")
