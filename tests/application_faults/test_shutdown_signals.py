"""SIGINT, SIGTERM and sys.exit with 200 prefetched deliveries: nothing dead-lettered,
nothing acked unprocessed (issue 32, finding 4).

A child process (``signal_app.py``) consumes with ``delivery.process()`` and
prefetch 200, appending each id to a file after its work. At the 20th delivery its
work holds, the test sends the signal, and the interruption lands inside
process() with 199 more deliveries unsettled (the ``exit-in-work`` variants raise
``SystemExit`` there themselves). Then the broker is counted: the dead-letter
queue must be empty and a fresh consumer drains the queue; every published id is
in the processed file or drained (LOST 0), and the in-flight one is drained, not
dead-lettered.

Before the fix process() rejected on any ``BaseException``: every variant whose
interruption unwinds through process() dead-lettered its in-flight delivery (the
row counts it LOST: a healthy message was never processed and sits in the DLQ).
SIGTERM with Python's default disposition kills the process without unwinding:
nothing is settled and the broker requeues it all, before and after the fix.
``python -m tests.application_faults.test_shutdown_signals --old-code`` runs the
rows against the pre-fix packages (``/tmp/ab-old-path``, a worktree of 8b2475b).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.testing import BrokerHarness, eventually
from tests.application_faults.on_broker import drain, on_rabbitmq
from tests.scoreboard.checker import History, ScoreRow, markdown, score

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("signal_app.py")
#: Symlinks to the packages of 8b2475b, before the fix (made by hand; not in CI).
OLD_CODE_PATH = "/tmp/ab-old-path"

#: How each variant stops the app: a signal the test sends, or None (the work exits by itself).
VARIANTS: dict[str, signal.Signals | None] = {
    "sync-sigint": signal.SIGINT,                 # default handler: KeyboardInterrupt
    "sync-sigterm-exit": signal.SIGTERM,          # signal.signal(SIGTERM, lambda *_: sys.exit(0))
    "sync-sigterm-default": signal.SIGTERM,       # no handler: the process dies without unwinding
    "sync-exit-in-work": None,                    # the work raises SystemExit
    "async-sigint": signal.SIGINT,                # asyncio.run cancels the main task: CancelledError
    "async-sigterm-cancel": signal.SIGTERM,       # loop.add_signal_handler(SIGTERM, task.cancel)
    "async-exit-in-work": None,                   # the work raises SystemExit inside the task
}
#: Variants whose interruption unwinds through process() (all but a SIGTERM nobody handles).
UNWINDS = {v for v in VARIANTS if v != "sync-sigterm-default"}


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def row_shutdown_signal(harness: BrokerHarness, variant: str, n: int = 400, *, prefetch: int = 200, work_ms: float = 20,
                        hold_at: int = 20, old_code: bool = False) -> tuple[ScoreRow, dict[str, Any]]:
    """Publish *n* ids, let the child app consume them with *prefetch* and stop it at
    its *hold_at*-th delivery the *variant*'s way; the row and what the broker and the
    app saw. *old_code* runs the app on the pre-fix packages (by hand only)."""
    stop = VARIANTS[variant]
    queue = harness.new_queue()
    history = History()
    ids = [f"sig-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
    with ackbridge.connect(harness.url(), reconnect=False, **harness.connect_options()) as conn:
        confirms = [(i, conn.publish(harness.publish_target(queue), i.encode(), message_id=i)) for i in ids]
        for message_id, confirm in confirms:
            history.attempted.add(message_id)
            history.outcome(message_id, confirm.result(10).status)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if old_code:
        env["PYTHONPATH"] = OLD_CODE_PATH
    seen: dict[str, Any] = {"variant": variant, "code": "old 8b2475b" if old_code else "current"}
    with tempfile.TemporaryDirectory(prefix="ab-signal-") as tmp:
        out = Path(tmp)
        log = (out / "child.log").open("w")
        start = time.monotonic()
        # cwd outside the repository: with old_code the child must not import ./ackbridge.
        child = subprocess.Popen([sys.executable, str(APP), harness.url(), queue, tmp, variant, str(prefetch),
                                  str(work_ms), str(hold_at)], cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            if stop is not None:
                eventually(lambda: (out / "holding").exists() or child.poll() is not None, timeout=60,
                           message="the app holding its delivery")
                assert child.poll() is None, f"the app ended before the signal: {(out / 'child.log').read_text()}"
                seen["unacked_at_signal"] = harness.unacked(queue)
                seen["processed_at_signal"] = len(_lines(out / "processed"))
                child.send_signal(stop)
            seen["rc"] = child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            log.close()
        history.elapsed_s = time.monotonic() - start
        processed = _lines(out / "processed")
        status = json.loads((out / "status.json").read_text()) if (out / "status.json").exists() else {}
        holding = (out / "holding").read_text() if (out / "holding").exists() else None
        seen["child_log_tail"] = (out / "child.log").read_text()[-600:]
    seen["stopped_by"] = status.get("stopped_by")
    seen["imported"] = status.get("ackbridge")
    in_flight = holding or status.get("in_flight")

    # The child's connection is gone: the broker has taken back what it held unsettled.
    eventually(lambda: harness.unacked(queue) == 0, timeout=30, message="no delivery left unacked")
    dead = [body.decode() for body in harness.dead_lettered(queue)]
    drained = drain(harness, queue, harness.ready(queue))
    history.delivered = Counter(processed) + Counter(drained)
    history.dead_lettered = set(dead)
    row = score(harness.name, "consumer", f"{variant}, prefetch {prefetch}"
                + (" (old code 8b2475b)" if old_code else ""), history)
    published = set(ids)
    seen.update({
        "processed": len(processed), "drained": len(drained), "dead": len(dead),
        "in_flight": in_flight,
        "in_flight_fate": sorted(name for name, where in (("processed", processed), ("drained", drained),
                                                        ("dead-lettered", dead)) if in_flight in where),
        "in_both": sorted(set(processed) & set(drained)),
        # Settled without its work done: neither processed nor still in the queue.
        "gone_unprocessed": len(published - set(processed) - set(drained)),
        "left_after_drain": harness.ready(queue),
    })
    return row, seen


@pytest.mark.rabbitmq
@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_shutdown_signal_dead_letters_nothing_and_acks_nothing_unprocessed(variant: str) -> None:
    row, seen = on_rabbitmq(row_shutdown_signal, variant)
    print(markdown([row]), seen)
    if variant != "sync-sigterm-default":  # killed before it could say
        assert str(seen["imported"]).startswith(str(ROOT)), f"the app ran another ackbridge: {seen}"
    if VARIANTS[variant] is not None:
        assert seen["unacked_at_signal"] == 200, f"the app did not hold 200 prefetched deliveries: {seen}"
    assert row.lost == 0 and row.unexpected == 0, f"{markdown([row])}{seen}"
    assert seen["dead"] == 0, f"an interruption dead-lettered a healthy message\n{markdown([row])}{seen}"
    assert seen["gone_unprocessed"] == 0, f"acked without being processed: {seen}"
    # The held delivery is interrupted before its id is written, so it is never processed;
    # a duplicate would be a processed delivery whose ack was lost on the way out.
    assert row.duplicated == 0, f"processed and still in the queue: {seen['in_both']}\n{markdown([row])}"
    assert seen["in_flight_fate"] == ["drained"], f"the interrupted delivery was not handed back: {seen}"
    assert seen["left_after_drain"] == 0, seen
    if variant in UNWINDS:
        expected = {"sync-sigint": "KeyboardInterrupt", "async-sigint": "CancelledError",
                    "async-sigterm-cancel": "CancelledError"}.get(variant, "SystemExit")
        assert seen["stopped_by"] == expected, seen


def main(argv: list[str] | None = None) -> None:
    """Every variant once, on the current code or (``--old-code``) on 8b2475b; prints the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--old-code", action="store_true", help=f"run the app on {OLD_CODE_PATH}")
    parser.add_argument("variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args(argv)
    from tests.rabbitmq.harness import RabbitHarness

    rows = []
    for variant in args.variants:
        harness = RabbitHarness()
        try:
            row, seen = row_shutdown_signal(harness, variant, old_code=args.old_code)
        finally:
            harness.cleanup()
        rows.append(row)
        seen.pop("child_log_tail")
        print(variant, seen, flush=True)
    print(markdown(rows))


if __name__ == "__main__":
    main()
