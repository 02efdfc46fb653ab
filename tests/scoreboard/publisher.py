"""The publisher rows of the scoreboard (issue 15): faults hit while confirms are pending.

Each cell publishes *n* unique ids (message id = body = id, window 200) to one
queue while a consumer takes them online and acks them; at n/2 the fault hits:

* ``connection-cut``: the publisher's connection is severed through the fault
  seam (``ackbridge.testing.faults(conn).sever``);
* ``broker-restart``: the broker is stopped or SIGKILLed and started again
  (:mod:`tests.scoreboard.publisher_targets`);
* ``process-kill`` (embedded): the publisher's process, which holds the
  embedded broker, is SIGKILLed.

Two modes: ``plain`` (each id published once; unknowns are counted, LOST =
confirmed and never delivered must be 0) and ``retransmit``
(``publisher(retransmit=True)`` and ``consume(dedupe_window=...)``: every
attempted id must be delivered and no copy may reach the application).

    .venv/bin/python -m tests.scoreboard.publisher --n 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ackbridge
from ackbridge.errors import AckbridgeError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import faults
from ackbridge.urls import redact
from tests.scoreboard.publisher_targets import LOSES_ON_KILL, RESTART_FAULT, TARGETS, Target

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


@dataclass
class PubHistory:
    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    indeterminate: set[str] = field(default_factory=set)
    #: Confirmed before the broker died (a broker that loses unsaved confirms may lose only these).
    confirmed_at_fault: set[str] = field(default_factory=set)
    #: Handed to the application, per id.
    delivered: Counter[str] = field(default_factory=Counter)
    #: Copies the consumer's dedupe window acked without handing them out.
    dropped_copies: int = 0
    retransmitted: int = 0
    pending_at_fault: int = 0
    injections: int = 0
    fault_end: float | None = None
    first_confirm_after: float | None = None
    elapsed_s: float = 0.0

    def outcome(self, message_id: str, status: ConfirmStatus) -> None:
        {ConfirmStatus.CONFIRMED: self.confirmed, ConfirmStatus.REFUSED: self.refused,
         ConfirmStatus.UNKNOWN: self.indeterminate}[status].add(message_id)


@dataclass(frozen=True)
class PublisherRow:
    broker: str
    fault: str
    mode: str
    injections: int = 0
    pending_at_fault: int = 0
    attempted: int = 0
    confirmed: int = 0
    indeterminate: int = 0
    delivered: int = 0
    lost: int = 0
    broker_lost: int = 0
    unexpected: int = 0
    duplicated: int = 0
    recovered: int = 0
    retransmitted: int = 0
    app_duplicates: int = 0
    recovery_s: str = "-"
    #: Messages the broker still held after the drain (ready + unacked), broker-side; None: cannot tell.
    left: int | None = None
    seconds: float = 0.0
    error: str = ""

    HEADERS = ("broker", "role", "fault", "mode", "injections", "confirms pending at fault", "attempted",
               "confirmed", "indeterminate", "delivered", "LOST", "lost by the broker", "UNEXPECTED",
               "duplicated", "recovered", "retransmitted", "duplicates delivered to the application",
               "left in the queue", "recovery s", "s", "result")

    @property
    def passed(self) -> bool:
        if self.error or self.lost or self.unexpected or self.left:
            return False
        if self.mode == "retransmit":
            # Every attempted id delivered (bar what the broker itself lost after confirming), once.
            return (self.app_duplicates == 0 and self.indeterminate == 0
                    and self.delivered == self.attempted - self.broker_lost)
        return True

    def cells(self) -> tuple[str, ...]:
        result = "ok" if self.passed else f"FAIL {self.error}".strip()
        return (self.broker, "publisher", self.fault, self.mode, str(self.injections), str(self.pending_at_fault),
                str(self.attempted), str(self.confirmed), str(self.indeterminate), str(self.delivered),
                str(self.lost), str(self.broker_lost), str(self.unexpected), str(self.duplicated),
                str(self.recovered), str(self.retransmitted), str(self.app_duplicates),
                "-" if self.left is None else str(self.left), self.recovery_s,
                f"{self.seconds:.1f}", result)


def score(target: Target, fault: str, mode: str, h: PubHistory) -> PublisherRow:
    delivered = set(h.delivered)
    missing = h.confirmed - delivered
    # Only a broker whose table says a kill can lose confirmed messages may lose them, and only those
    # confirmed before it died: counted apart, never hidden in LOST.
    broker_lost = (missing & h.confirmed_at_fault) if (fault != "connection-cut"
                                                       and target.durability in LOSES_ON_KILL) else set()
    recovery = (h.first_confirm_after - h.fault_end) if h.fault_end and h.first_confirm_after else None
    return PublisherRow(
        broker=target.broker, fault=fault, mode=mode, injections=h.injections, pending_at_fault=h.pending_at_fault,
        attempted=len(h.attempted), confirmed=len(h.confirmed), indeterminate=len(h.indeterminate),
        delivered=len(delivered), lost=len(missing - broker_lost), broker_lost=len(broker_lost),
        unexpected=len(delivered - h.attempted),
        duplicated=sum(c - 1 for c in h.delivered.values()) + h.dropped_copies,
        recovered=len(delivered & h.indeterminate), retransmitted=h.retransmitted,
        app_duplicates=sum(c - 1 for c in h.delivered.values()),
        recovery_s="-" if recovery is None else f"{max(recovery, 0.0):.2f}", seconds=h.elapsed_s)


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
            conn = ackbridge.connect(self.target.url, **self.target.options)
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
                    h.delivered[delivery.message_id or delivery.body.decode()] += 1
                    delivery.ack()
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
            with lock:
                resolved[0] += 1
            if h.fault_end is not None and h.first_confirm_after is None and confirm.outcome.confirmed:
                h.first_confirm_after = time.monotonic()

        i = after = 0
        while i < n or not _tail_done(h, after):
            message_id = f"{run}-{i}"
            h.attempted.add(message_id)
            confirm = publisher.publish(target.publish_to, message_id.encode(), message_id=message_id)
            confirm.add_done_callback(on_done)
            confirms.append(confirm)
            # The fault hits past n/2 once confirms are pending (a fast broker answers as fast
            # as it is fed: wait for a moment with PENDING_AT_FAULT unresolved), by 3n/4 at the latest.
            if not h.injections and i >= n // 2 and (i + 1 - resolved[0] >= PENDING_AT_FAULT or i >= 3 * n // 4):
                injector = _inject(target, fault, conn, confirms, h)
                started_at = i
            elif h.injections and i > started_at and (h.fault_end is None or h.first_confirm_after is None):
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


def _tail_done(h: PubHistory, after: int) -> bool:
    """TAIL publishes after the fault ended, and one of them confirmed (or RECOVERY_LIMIT_S passed)."""
    if h.fault_end is None or after < TAIL:
        return False
    return h.first_confirm_after is not None or time.monotonic() - h.fault_end > RECOVERY_LIMIT_S


def _unresolved(confirms: list[Any]) -> int:
    return sum(1 for c in list(confirms) if not c.done())


def _inject(target: Target, fault: str, conn: Any, confirms: list[Any], h: PubHistory) -> threading.Thread | None:
    h.injections += 1
    if fault == "connection-cut":
        h.pending_at_fault = _unresolved(confirms)
        faults(conn).sever("scoreboard cut the publisher's connection")
        h.fault_end = time.monotonic()
        return None
    restart_fn = target.restart
    assert restart_fn is not None

    def issuing() -> None:
        h.pending_at_fault = _unresolved(confirms)

    def down() -> None:
        # What was confirmed before the broker went (called at the end of the outage: the confirms
        # it sent before dying are in, and none comes while it is down).
        h.confirmed_at_fault = {str(c.message_id) for c in list(confirms)
                                if c.outcome is not None and c.outcome.confirmed}

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
    url, queue, run, n, WINDOW = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    lock = threading.Lock()
    def done(confirm):
        with lock:
            print(confirm.outcome.status.value, confirm.message_id, flush=True)
    conn = ackbridge.connect(url)
    publisher = conn.publisher(window=WINDOW)
    for i in range(n):
        message_id = f"{run}-{i}"
        with lock:
            print("attempted", message_id, flush=True)
        publisher.publish(queue, message_id.encode(), message_id=message_id).add_done_callback(done)
    publisher.flush()
    import time; time.sleep(600)
""")


def _publish_killed(target: Target, mode: str, n: int, h: PubHistory) -> None:
    run = uuid.uuid4().hex[:8]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_PUBLISHER, target.url, target.publish_to, run, str(n),
                             str(WINDOW)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    resolved = 0
    try:
        for line in proc.stdout:
            if not line.endswith("\n"):
                break  # cut short by the kill: the id in it may be truncated
            kind, message_id = line.split()
            if kind == "attempted":
                h.attempted.add(message_id)
                continue
            h.outcome(message_id, ConfirmStatus(kind))
            resolved += 1
            if resolved == n // 2:
                os.kill(proc.pid, signal.SIGKILL)  # the broker goes with it, confirms pending
                h.injections += 1
                h.fault_end = time.monotonic()
        # The pipe keeps what was printed before the kill: read to its end.
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    h.pending_at_fault = len(h.attempted) - len(h.confirmed | h.refused | h.indeterminate)
    h.confirmed_at_fault = set(h.confirmed)
    unresolved = h.attempted - h.confirmed - h.refused
    h.indeterminate |= unresolved
    if mode == "retransmit":
        # A killed process's retransmission queue dies with it: the application replays its
        # unconfirmed ids (same message ids) on a new publisher; dedupe_window drops the copies.
        with ackbridge.connect(target.url, **target.options) as conn:
            publisher = conn.publisher(window=WINDOW, confirm_timeout=5.0, **RETRANSMIT)
            confirms = [publisher.publish(target.publish_to, m.encode(), message_id=m) for m in sorted(unresolved)]
            publisher.flush(timeout=120)
            h.retransmitted = len(confirms) + publisher.retransmitted
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
        for fault in ("connection-cut", RESTART_FAULT[broker]):
            for mode in MODES:
                if (brokers and broker not in brokers) or (faults_ and fault not in faults_) or (
                        modes and mode not in modes):
                    continue
                out.append((broker, fault, mode))
    return out


def markdown(rows: list[PublisherRow]) -> str:
    lines = ["| " + " | ".join(PublisherRow.HEADERS) + " |", "|" + "---|" * len(PublisherRow.HEADERS)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


METHOD = (
    "From `python -m tests.scoreboard.publisher` (`tests/scoreboard/publisher.py`, targets in "
    "`publisher_targets.py`; CI runs the same cells on 300 ids: `tests/scoreboard/test_publisher_rows.py`). "
    "Each cell publishes unique ids (message id = body) with a window of 200 while a consumer on its own "
    "connection takes and acks them; at n/2 the fault hits with confirms pending (column 6: unresolved when "
    "it was issued). connection-cut: the publisher's connection severed through the fault seam "
    "(`ackbridge.testing.faults(conn).sever`). broker-restart: RabbitMQ `rabbitmqctl stop_app`, 2 s, "
    "`start_app` (classic, quorum and AMQP 1.0 on the shared broker); a private Mosquitto with "
    "`persistence true`, `autosave_interval 1` (a save a second) SIGKILLed, 2 s, started on its "
    "store; a private nats-server with a JetStream file store SIGKILLed, 2 s, started (the stream's "
    "ack_wait is 5 s: JetStream forgets acks not yet written at a kill and redelivers them after ack_wait). "
    "process-kill (embedded): the publisher's process, which holds the broker, SIGKILLed once half its "
    "publishes were confirmed. While the fault lasts, publishing goes on at one message per 5 ms, so "
    "publishes meet the outage; 50 more follow it, until one is confirmed (recovery s = fault end to that "
    "confirm). plain: each id published once; unknowns are counted (indeterminate) and LOST = confirmed, "
    "never delivered, must be 0; recovered = unknown but delivered. retransmit: `publisher(retransmit=True, "
    "max_attempts=50, retransmit_deadline=150)` and `consume(dedupe_window=10*n)`: every attempted id must be "
    "delivered and none twice to the application; duplicated = copies the broker delivered (the dedupe "
    "window acked and dropped them, or plain mode handed them out); retransmitted = sends again. A killed "
    "process's retransmission queue dies with it: for embedded process-kill, retransmitted counts the ids "
    "the application replayed on a new publisher (same message ids). lost by the broker: confirmed before a "
    "kill and never delivered, counted only where the capability table says a confirm is \"in memory until "
    "the next save\" (Mosquitto); never hidden in LOST. left in the queue: ready + unacked on the broker "
    "after the drain (Mosquitto: not readable, `-`).")
SECTION = "\n## Publisher rows"


def write_section(path: Path, rows: list[PublisherRow], n: int) -> None:
    """Put the publisher section into *path*, replacing an earlier one and keeping everything else."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = path.read_text() if path.exists() else "# Reliability scoreboard\n"
    section = f"{SECTION} (issue 15; generated {when}, {n} ids per cell)\n\n{METHOD}\n\n{markdown(rows)}"
    if SECTION in text:
        before, rest = text.split(SECTION, 1)
        after = rest.split("\n## ", 1)
        text = before.rstrip() + "\n" + section + ("\n## " + after[1] if len(after) > 1 else "")
    else:
        text = text.rstrip() + "\n" + section
    path.write_text(text)


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
