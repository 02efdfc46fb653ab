"""The publisher rows of the scoreboard (issue 15): faults hit while confirms are pending.

Each cell publishes *n* unique ids (message id = body = id, window 200) to one
queue while a consumer takes them online and acks them; at n/2 the fault hits:

* ``connection-cut``: the publisher's connection is severed through the fault
  seam (``ackbridge.testing.faults(conn).sever``);
* ``broker-restart``: the broker is stopped or SIGKILLed and started again
  (:mod:`tests.scoreboard.publisher_targets`);
* ``process-kill`` (embedded): the publisher's process, which holds the
  embedded broker, is SIGKILLed while its last publishes (half the window)
  are held in its group commit (the fault seam's ``hold_writes``).

Two modes: ``plain`` (each id published once; unknowns are counted, LOST =
confirmed and never delivered must be 0) and ``retransmit``
(``publisher(retransmit=True)`` and ``consume(dedupe_window=...)``: every
attempted id must be delivered and no copy may reach the application).

    .venv/bin/python -m tests.scoreboard.publisher --n 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import ackbridge
from ackbridge.errors import AckbridgeError, StaleDeliveryError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import faults
from ackbridge.urls import redact
from tests.scoreboard.publisher_rows import PubHistory, PublisherRow, markdown, score, write_section
from tests.scoreboard.publisher_targets import NO_RESTART, RESTART_FAULT, TARGETS, Target

MODES = ("plain", "retransmit")
WINDOW = 200
RETRANSMIT: dict[str, Any] = {"retransmit": True, "max_attempts": 50, "retransmit_deadline": 150.0}
#: Between publishes while a restart is under way (a pace, not a wait for state).
PACE_S = 0.005
#: Nothing delivered for this long, with ids still missing, ends the drain (above the scoreboard
#: NATS stream's ack_wait: redeliveries of acks a killed JetStream forgot come after it).
QUIET_LIMIT_S = 20.0
#: Confirms unresolved when the fault is injected (looked for from n/2 on).
PENDING_AT_FAULT = WINDOW // 4
#: Published after the fault ended (recovery is measured on them).
TAIL = 50
#: The tail goes on until a publish after the fault is confirmed, at most this long.
RECOVERY_LIMIT_S = 60.0


# ---- the consumer (online, in this process) ----------------------------------------------------
class OnlineConsumer(threading.Thread):
    """Takes and acks deliveries until told the expected ids are final, then until they are all
    in (or nothing came for ``quiet`` s)."""

    def __init__(self, target: Target, h: PubHistory, dedupe: int | None, deadline: float) -> None:
        super().__init__(name="scoreboard-pub-consumer", daemon=True)
        self.target, self.h, self.dedupe, self.deadline = target, h, dedupe, deadline
        self.ready = threading.Event()
        self.expected: set[str] | None = None  # set when publishing is over
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported in the row, never lost in a thread
            self.error = exc
            self.ready.set()

    def _run(self) -> None:
        h, quiet_since = self.h, time.monotonic()
        while time.monotonic() < self.deadline:
            try:
                conn = ackbridge.connect(self.target.url, **self.target.options)
            except AckbridgeError:  # the broker is down (a restart): try again
                time.sleep(0.5)  # back-off before the next connect, not a wait for state
                continue
            consumer = None
            try:
                consumer = conn.consume(self.target.queue, prefetch=100, dedupe_window=self.dedupe)
                self.ready.set()
                while time.monotonic() < self.deadline:
                    delivery = consumer.get(timeout=0.5)
                    if delivery is None:
                        if self._finished(time.monotonic() - quiet_since):
                            return
                        continue
                    quiet_since = time.monotonic()
                    message_id = delivery.message_id or delivery.body.decode()
                    h.delivered[message_id] += 1
                    h.delivered_at.setdefault(message_id, quiet_since)
                    try:
                        delivery.ack()
                    except StaleDeliveryError:
                        h.stale_acks[message_id] += 1  # its connection ended: the broker delivers it again
            except AckbridgeError as exc:
                print(f"  consumer: {type(exc).__name__}: {redact(str(exc))[:100]}; reconnecting", flush=True)
                time.sleep(0.5)  # back-off before the next connect, not a wait for state
            finally:
                if consumer is not None:
                    h.dropped_copies += consumer.duplicates_dropped
                try:
                    conn.close()
                except AckbridgeError:
                    pass

    def _finished(self, quiet: float) -> bool:
        expected = self.expected
        if expected is None:
            return False
        if quiet >= QUIET_LIMIT_S:
            return True
        if not (set(self.h.delivered) >= expected and quiet >= 2.0):
            return False
        # A full drain: what the broker still holds (an unknown publish it stored, a redelivery
        # waiting for ack_wait) comes out too, where the broker can be asked.
        held = self.target.held
        return held is None or held() == 0


# ---- the publisher, in this process ------------------------------------------------------------
def _publish(target: Target, fault: str, mode: str, n: int, h: PubHistory) -> None:
    """n ids at full speed up to n/2, then the fault; while it lasts, publishing goes on (paced) so
    that confirms are pending when the broker goes and publishes meet the outage; TAIL more after."""
    conn = ackbridge.connect(target.url, **target.options)
    try:
        publisher = conn.publisher(window=WINDOW, confirm_timeout=5.0, **(RETRANSMIT if mode == "retransmit" else {}))
        confirms: list[Any] = []
        run = uuid.uuid4().hex[:8]
        injector: threading.Thread | None = None
        started_at = n

        resolved = [0]
        lock = threading.Lock()

        def on_done(confirm: Any) -> None:
            h.resolved_at[str(confirm.message_id)] = time.monotonic()
            with lock:
                resolved[0] += 1
            if h.fault_end is not None and h.first_confirm_after is None and confirm.outcome.confirmed:
                h.first_confirm_after = time.monotonic()

        watch = SaveWatch(target, n // 10) if fault == "broker-restart" and target.last_save is not None else None
        i = after = 0
        while i < n or not _tail_done(h, after):
            message_id = f"{run}-{i}"
            h.attempted.add(message_id)
            h.published_at[message_id] = time.monotonic()
            confirm = publisher.publish(target.publish_to, message_id.encode(), message_id=message_id)
            confirm.add_done_callback(on_done)
            confirms.append(confirm)
            # The fault hits past n/2 once confirms are pending (a fast broker answers as fast
            # as it is fed: wait for a moment with PENDING_AT_FAULT unresolved), by 3n/4 at the latest.
            # A broker that saves after it confirms: after one of its saves, frozen (SaveWatch), once
            # PENDING_AT_FAULT are pending (it answers nothing more: they pile up).
            if not h.injections and i >= n // 2:
                pending = i + 1 - resolved[0]
                if (watch.ready(i) and watch.frozen and pending >= PENDING_AT_FAULT) if watch is not None else (
                        pending >= PENDING_AT_FAULT or i >= 3 * n // 4):
                    injector = _inject(target, fault, conn, confirms, h)
                    started_at = i
            elif h.injections and i > started_at and (h.fault_end is None or h.first_confirm_after is None):
                if h.fault_end is None:
                    h.published_during_fault += 1
                time.sleep(PACE_S)  # publishing meets the outage and the recovery at a modest rate
            if h.fault_end is not None:
                after += 1
            i += 1
        if injector is not None:
            injector.join(timeout=300)
        publisher.flush(timeout=300)
        h.retransmitted = publisher.retransmitted
        for confirm in confirms:
            outcome = confirm.outcome
            h.outcome(str(confirm.message_id), outcome.status if outcome is not None else ConfirmStatus.UNKNOWN)
    finally:
        try:
            conn.close()
        except AckbridgeError:
            pass


#: Before the save the kill follows, publishing runs at full speed for about this long, so the
#: consumer lags: ids confirmed just before that save are still undelivered at the kill (they must
#: survive), and so are ids confirmed after it (the window).
FULL_SPEED_BEFORE_SAVE_S = 0.3


class SaveWatch:
    """Where the fault hits on a broker that confirms before it saves (Mosquitto). Past n/2,
    publishing goes on paced until the broker has saved its store once (the consumer's session and
    what came before are on disk) and its next save is nearly due (``save_period_s``); then at full
    speed across that save and *after* more publishes past it; then the broker is frozen (SIGSTOP: it
    confirms and saves nothing more), and the kill comes once PENDING_AT_FAULT confirms are pending. So
    the kill finds ids confirmed before the broker's last save and not yet delivered (they must
    survive), ids confirmed after it (the declared window) and confirms pending."""

    def __init__(self, target: Target, after: int) -> None:
        assert target.last_save is not None and target.save_period_s is not None and target.freeze is not None
        self.last_save, self.period, self.freeze = target.last_save, target.save_period_s, target.freeze
        self.after = after
        self.frozen = False
        self.since = time.time()
        self.seen: float | None = None  # the save the next one is awaited after
        self.ready_at = 0  # the publish at which it was seen

    def ready(self, i: int) -> bool:
        """True once the awaited save is seen; paces (sleeps PACE_S) while the next one is not yet near."""
        if self.ready_at:
            if not self.frozen and i >= self.ready_at + self.after:
                self.freeze()  # it answers nothing more: confirms pile up pending, then the kill
                self.frozen = True
            return True
        saved, now = self.last_save(), time.time()
        if saved is None or saved < self.since:
            time.sleep(PACE_S)  # a pace, not a wait for state: publishing goes on meanwhile
            return False
        if self.seen is None:
            self.seen = saved
        if saved > self.seen or now > self.seen + 3 * self.period:
            self.ready_at = i  # (or the timer is late: hit anyway, the check reads the real last save)
            return True
        if now < self.seen + self.period - FULL_SPEED_BEFORE_SAVE_S:
            time.sleep(PACE_S)
        return False


def _tail_done(h: PubHistory, after: int) -> bool:
    """TAIL publishes after the fault ended, and one of them confirmed (or RECOVERY_LIMIT_S passed)."""
    if h.fault_end is None or after < TAIL:
        return False
    return h.first_confirm_after is not None or time.monotonic() - h.fault_end > RECOVERY_LIMIT_S


def _unresolved(confirms: list[Any]) -> int:
    return sum(1 for c in list(confirms) if not c.done())


def _inject(target: Target, fault: str, conn: Any, confirms: list[Any], h: PubHistory) -> threading.Thread | None:
    h.injections += 1
    h.fault_start = time.monotonic()  # a restart sets it again when it issues the kill
    if fault == "connection-cut":
        h.pending_at_fault = _unresolved(confirms)
        faults(conn).sever("scoreboard cut the publisher's connection")
        h.fault_end = time.monotonic()
        return None
    restart_fn = target.restart
    assert restart_fn is not None

    def issuing() -> None:
        h.fault_start = time.monotonic()
        h.pending_at_fault = _unresolved(confirms)

    def down() -> None:
        # What was confirmed before the broker went (called at the end of the outage: the confirms
        # it sent before dying are in, and none comes while it is down).
        h.down_at = time.monotonic()
        h.confirmed_at_fault = {str(c.message_id) for c in list(confirms)
                                if c.outcome is not None and c.outcome.confirmed}
        if target.last_save is not None:  # the dead broker's store: its last save before the kill
            saved = target.last_save()
            h.last_save = float("-inf") if saved is None else time.monotonic() - (time.time() - saved)

    def restart() -> None:
        try:
            restart_fn(issuing, down)
        finally:
            h.fault_end = time.monotonic()

    thread = threading.Thread(target=restart, name="scoreboard-fault")
    thread.start()
    return thread


# ---- the embedded broker: its publisher's process SIGKILLed -------------------------------------
_KILLED_PUBLISHER = textwrap.dedent("""
    import sys, threading, ackbridge
    from ackbridge.testing.faults import faults
    url, queue, run, n, WINDOW = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    lock = threading.Lock()
    def done(confirm):
        with lock:
            print(confirm.outcome.status.value, confirm.message_id, flush=True)
    conn = ackbridge.connect(url)
    publisher = conn.publisher(window=WINDOW)
    held = min(n // 2, WINDOW // 2)  # within the window: the held publishes never wait for room
    for i in range(n):
        if i == n - held:
            # The rest confirmed; the last ones stay in the group commit (held), so
            # confirms are pending when the kill comes, however fast this process ran
            # ahead of the reader of its output.
            publisher.flush()
            faults(conn).hold_writes(True)
        message_id = f"{run}-{i}"
        with lock:
            print("attempted", message_id, flush=True)
        publisher.publish(queue, message_id.encode(), message_id=message_id).add_done_callback(done)
    with lock:
        print("held -", flush=True)
    import time; time.sleep(600)
""")


def _publish_killed(target: Target, mode: str, n: int, h: PubHistory) -> None:
    run = uuid.uuid4().hex[:8]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_PUBLISHER, target.url, target.publish_to, run, str(n),
                             str(WINDOW)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if not line.endswith("\n"):
                break  # cut short by the kill: the id in it may be truncated
            kind, message_id = line.split()
            if kind == "attempted":
                h.attempted.add(message_id)
                continue
            if kind == "held":  # the last publishes held in the group commit, the rest confirmed
                os.kill(proc.pid, signal.SIGKILL)  # the broker goes with it, confirms pending
                h.injections += 1
                h.fault_end = time.monotonic()
                continue
            h.outcome(message_id, ConfirmStatus(kind))
        # The pipe keeps what was printed before the kill: read to its end.
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    h.pending_at_fault = len(h.attempted) - len(h.confirmed | h.refused | h.indeterminate)
    h.confirmed_at_fault = set(h.confirmed)
    unresolved = h.attempted - h.confirmed - h.refused
    h.indeterminate |= unresolved
    if mode == "retransmit":
        # A killed process's retransmission queue dies with it: the application replays its
        # unconfirmed ids (same message ids) on a new publisher; dedupe_window drops the copies.
        # Those are the application's sends (replayed), not ackbridge's (retransmitted: the new
        # publisher's own sends again, if any).
        with ackbridge.connect(target.url, **target.options) as conn:
            publisher = conn.publisher(window=WINDOW, confirm_timeout=5.0, **RETRANSMIT)
            confirms = [publisher.publish(target.publish_to, m.encode(), message_id=m) for m in sorted(unresolved)]
            publisher.flush(timeout=120)
            h.replayed = len(confirms)
            h.retransmitted = publisher.retransmitted
            for confirm in confirms:
                if confirm.outcome is not None and confirm.outcome.confirmed:
                    h.first_confirm_after = h.first_confirm_after or time.monotonic()
                    h.confirmed.add(str(confirm.message_id))
                    h.indeterminate.discard(str(confirm.message_id))


# ---- a cell -------------------------------------------------------------------------------
def run_cell(broker: str, fault: str, mode: str, n: int, deadline_s: float = 300.0) -> PublisherRow:
    try:
        target = TARGETS[broker]()
    except Exception as exc:
        traceback.print_exc()
        return PublisherRow(broker, fault, mode, error=f"broker unavailable: {redact(str(exc))[:120]}")
    h = PubHistory()
    started = time.monotonic()
    try:
        consumer = OnlineConsumer(target, h, 10 * n if mode == "retransmit" else None, started + deadline_s)
        consumer.start()
        if not consumer.ready.wait(60) or consumer.error is not None:
            raise RuntimeError(f"the consumer did not start: {consumer.error!r}")
        if fault == "process-kill":
            _publish_killed(target, mode, n, h)
        else:
            _publish(target, fault, mode, n, h)
        consumer.expected = set(h.attempted if mode == "retransmit" else h.confirmed)
        consumer.join(timeout=deadline_s + 30)
        if consumer.error is not None:
            raise consumer.error
        h.elapsed_s = time.monotonic() - started
        row = score(target, fault, mode, h)
        return dataclasses.replace(row, left=_left(target))
    except Exception as exc:
        traceback.print_exc()
        return PublisherRow(broker, fault, mode, error=f"{type(exc).__name__}: {redact(str(exc))[:120]}")
    finally:
        target.cleanup()


def _left(target: Target) -> int | None:
    """What the broker still holds once the consumer is done (acks are asynchronous: polled a while)."""
    if target.held is None:
        return None
    end = time.monotonic() + 15
    while (left := target.held()) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def cells(brokers: list[str] | None = None, faults_: list[str] | None = None,
          modes: list[str] | None = None) -> list[tuple[str, str, str]]:
    out = []
    for broker in TARGETS:
        for fault in ("connection-cut", *(() if broker in NO_RESTART else (RESTART_FAULT[broker],))):
            for mode in MODES:
                if (brokers and broker not in brokers) or (faults_ and fault not in faults_) or (
                        modes and mode not in modes):
                    continue
                out.append((broker, fault, mode))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--brokers", nargs="*")
    parser.add_argument("--faults", nargs="*")
    parser.add_argument("--modes", nargs="*")
    parser.add_argument("--write", action="store_true", help="(re)write the publisher section of docs/scoreboard.md")
    args = parser.parse_args()
    rows = []
    for broker, fault, mode in cells(args.brokers, args.faults, args.modes):
        row = run_cell(broker, fault, mode, args.n)
        print(" | ".join(row.cells()), flush=True)
        rows.append(row)
    print()
    print(markdown(rows))
    if args.write:
        write_section(Path(__file__).resolve().parents[2] / "docs" / "scoreboard.md", rows, args.n)
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
