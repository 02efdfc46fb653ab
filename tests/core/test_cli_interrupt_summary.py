"""``ackbridge consume --json`` stopped by SIGINT/SIGTERM still prints its JSON summary (issue 37).

The command runs as a user runs it (``python -m ackbridge`` in a subprocess) on the
embedded broker; the test learns how far it got from the broker file (what is
acked or leased), never from a sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.messages import QueueInfo

QUEUE = "interrupted"
#: Generous bound for a poll to see what it waits for: a failure, not a timing assertion.
DEADLINE_S = 120.0


def publish(url: str, count: int) -> None:
    with ackbridge.connect(url) as conn:
        confirms = [conn.publish(QUEUE, f"m-{i}".encode(), message_id=f"m-{i}") for i in range(count)]
        assert all(c.result().confirmed for c in confirms)


def wait_for_queue(url: str, condition: Callable[[QueueInfo], bool], proc: subprocess.Popen[str]) -> QueueInfo:
    deadline = time.monotonic() + DEADLINE_S
    with ackbridge.connect(url) as conn:
        while True:
            info = conn.inspect_queue(QUEUE)
            if condition(info):
                return info
            assert proc.poll() is None, f"consume exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, f"the queue never got there: {info}"
            time.sleep(0.05)


@contextmanager
def consuming(tmp_path: Path, url: str, *extra: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "ackbridge", "consume", url, "--queue", QUEUE, "--json",
                             "--idle", "600", "-n", "1000", *extra], cwd=tmp_path, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=DEADLINE_S)
    try:
        return proc.returncode, json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON summary on stdout (exit {proc.returncode}):\nstdout: {out!r}\nstderr: {err}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_prints_the_json_summary_with_counts_so_far(tmp_path: Path, signum: signal.Signals) -> None:
    url = f"local://{tmp_path}/broker.db"
    publish(url, 7)
    with consuming(tmp_path, url) as proc:
        # All 7 acked: nothing ready, nothing leased. It now waits in get() for more (--idle 600, -n 1000).
        wait_for_queue(url, lambda q: q.messages == 0 and q.unacked == 0, proc)
        proc.send_signal(signum)
        code, summary = finish(proc)
    assert code == 0
    assert summary["interrupted"] is True
    assert summary["stopped_by"] == signum.name
    assert summary["received"] == 7 and summary["settled"] == 7
    assert summary["handed_back"] == 0 and "forced" not in summary


def test_second_signal_still_prints_the_partial_summary(tmp_path: Path) -> None:
    url = f"local://{tmp_path}/broker.db"
    publish(url, 1)
    # The delivery is held for a long simulated work. The first signal's drain gives it one second
    # (--drain-timeout 1), then abandons it: the lease goes back to the queue, which tells the test
    # the first signal was handled (two signals sent back to back would be merged into one).
    with consuming(tmp_path, url, "--prefetch", "1", "--work-ms", "600000", "--drain-timeout", "1") as proc:
        wait_for_queue(url, lambda q: q.messages == 0 and q.unacked == 1, proc)
        proc.send_signal(signal.SIGINT)
        wait_for_queue(url, lambda q: q.messages == 1 and q.unacked == 0, proc)
        proc.send_signal(signal.SIGINT)  # the main thread is still in its work: stop it now
        code, summary = finish(proc)
    assert code == 130
    assert summary["interrupted"] is True and summary["forced"] is True
    assert summary["stopped_by"] == "SIGINT"
    assert summary["received"] == 1 and summary["settled"] == 0 and summary["abandoned"] == 1
    # Nothing was acked: the broker holds the message again, for the next consumer.
    with ackbridge.connect(url) as conn:
        assert conn.inspect_queue(QUEUE).messages == 1


def test_a_run_that_ends_by_itself_is_not_interrupted(tmp_path: Path) -> None:
    url = f"local://{tmp_path}/broker.db"
    publish(url, 3)
    result = subprocess.run([sys.executable, "-m", "ackbridge", "consume", url, "--queue", QUEUE, "--json", "-n", "3"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["received"] == 3 and summary["interrupted"] is False and "stopped_by" not in summary
