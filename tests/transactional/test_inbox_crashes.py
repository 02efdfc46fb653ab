"""Consumer processes SIGKILLed at the two points that matter, then restarted:

* after the handler's write, before the commit: the write rolls back with the id,
  the broker redelivers, the handler runs again -- once in the effect table;
* after the commit, before the ack: the broker redelivers, the inbox holds the id,
  the copy is acked without running the handler.

Two competing processes, one killed at each point, on copies the broker stored
twice; every id's effect exactly once (LOST 0), the queue empty on the broker."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.transactional.appdb import AppDb
from tests.transactional.scenario import assert_exactly_once, assert_queue_empty, ids, publish_with_copies

COUNT, COPIES = 60, 10
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)


def start(harness: Any, queue: str, app_db: AppDb, face: str, mode: str, kill: str, after: int = 8
          ) -> subprocess.Popen[str]:
    queue_type = harness.connect_options().get("queue_type", "-")
    return subprocess.Popen([sys.executable, "-m", "tests.transactional.consumer_app", harness.url(), queue_type,
                             queue, app_db.kind, app_db.target, app_db.prefix, face, mode, kill, str(after)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    try:
        out, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, out.split("\n")


@pytest.mark.parametrize(("face", "mode"), [("sync", "single"), ("sync", "batch"), ("async", "single")])
def test_killed_before_commit_and_after_commit_then_restarted(app_db: AppDb, harness: Any, face: str,
                                                              mode: str) -> None:
    queue = harness.new_queue()
    names = ids(COUNT)
    publish_with_copies(harness, queue, names, COPIES)
    first = [start(harness, queue, app_db, face, mode, "before_commit"),
             start(harness, queue, app_db, face, mode, "after_commit")]
    results = [finish(p) for p in first]
    # Both died where they were told to: the faults happened.
    assert [code for code, _ in results] == [-signal.SIGKILL, -signal.SIGKILL], results
    assert any(line.startswith("killing") for line in results[1][1])
    again = [start(harness, queue, app_db, face, mode, "none") for _ in range(2)]
    results += [finish(p) for p in again]
    assert [code for code, _ in results[2:]] == [0, 0], results[2:]

    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)
    lines = [line for _, out in results for line in out if line]
    if mode == "single":
        ran = Counter(line.split()[1] for line in lines if line.startswith("ran "))
        dups = sum(1 for line in lines if line.startswith("dup "))
        assert all(n == 1 for n in ran.values()), ran
        killed_new = len(set(names) - set(ran))  # committed by the killed process, never acked there
        assert killed_new <= 1
        assert dups >= COPIES + killed_new
    else:
        dups = sum(int(line.split()[1]) for line in lines if line.startswith("dup "))
        assert dups >= COPIES
