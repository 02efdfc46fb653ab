"""Fault scenarios of the embedded broker, shared by its tests and the scoreboard's embedded rows.

Each one publishes unique ids with confirms, injects its fault, drains, and
returns what happened as a :class:`Result` (a checker History plus the typed
errors it saw). Waits for state poll with deadlines (``eventually``); the only
sleep is the length of a pause fault itself.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ackbridge
from ackbridge.errors import AckbridgeError, StaleDeliveryError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing import eventually
from ackbridge.testing.faults import faults, transport_of
from ackbridge.testing.processes import reap
from ackbridge_local.errors import DamagedFileError, StorageFullError
from tests.local import damage
from tests.local.harness import LocalHarness
from tests.scoreboard.checker import History


@dataclass
class Result:
    history: History = field(default_factory=History)
    #: "where: ErrorType: message" for every typed error the fault produced.
    errors: list[str] = field(default_factory=list)
    #: Exceptions that escaped a thread (must stay empty).
    thread_deaths: list[str] = field(default_factory=list)
    #: Confirmed before the file itself was destroyed (deleted, corrupted): gone with it.
    destroyed: int = 0

    def note(self, where: str, exc: BaseException) -> None:
        self.errors.append(f"{where}: {type(exc).__name__}: {exc}")


def publish(url: str, queue: str, ids: list[str], history: History, **options: Any) -> None:
    with ackbridge.connect(url, **options) as conn:
        confirms = []
        for message_id in ids:
            history.attempted.add(message_id)
            confirms.append(conn.publish(queue, message_id.encode(), message_id=message_id))
        assert conn.flush(timeout=60)
    for confirm in confirms:
        assert confirm.outcome is not None
        history.outcome(str(confirm.message_id), confirm.outcome.status)


def new_ids(n: int, tag: str = "") -> list[str]:
    prefix = uuid.uuid4().hex[:6]
    return [f"{prefix}{tag}-{i}" for i in range(n)]


class Drainer(threading.Thread):
    """A consumer on its own connection that acks everything it gets, counting ids."""

    def __init__(self, url: str, queue: str, history: History, **options: Any) -> None:
        super().__init__(name="scenario-drainer", daemon=True)
        self.conn = ackbridge.connect(url, **options)
        self.consumer = self.conn.consume(queue, prefetch=20)
        self.history = history
        self.halt = threading.Event()
        self.seen: Counter[str] = Counter()

    def run(self) -> None:
        while not self.halt.is_set():
            delivery = self.consumer.get(timeout=0.1)
            if delivery is None:
                continue
            try:
                delivery.ack()
            except StaleDeliveryError:
                self.history.stale_refused += 1
                continue  # not settled: it comes back
            self.seen[str(delivery.message_id)] += 1
            self.history.delivered[str(delivery.message_id)] += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)
        self.conn.close()


def drain_fresh(url: str, queue: str, history: History, quiet_s: float = 2.0) -> int:
    """A fresh connection takes what is left until the queue is quiet for *quiet_s*."""
    got = 0
    with ackbridge.connect(url) as conn:
        consumer = conn.consume(queue, prefetch=100)
        while (delivery := consumer.get(timeout=quiet_s)) is not None:
            delivery.ack()
            history.delivered[str(delivery.message_id)] += 1
            got += 1
    return got


PAUSED_CONSUMER = textwrap.dedent("""
    import sys, ackbridge
    conn = ackbridge.connect(sys.argv[1], lease_timeout=1)
    consumer = conn.consume(sys.argv[2], prefetch=100)
    while True:   # holds everything it gets, settles nothing; SIGKILLed in the end
        d = consumer.get(timeout=0.05)
        if d is not None:
            print(d.message_id, flush=True)
""")


def _lines(proc: subprocess.Popen[str], into: list[str]) -> threading.Thread:
    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            into.append(line.strip())

    reader = threading.Thread(target=read, name="scenario-reader", daemon=True)
    reader.start()
    return reader


def pause_outside_write_lock(proc: subprocess.Popen[str], path: Path, tries: int = 50) -> None:
    """SIGSTOP *proc* at a moment it holds no write transaction on the broker file.

    Paused inside one, it would stall every other client of the file until it
    resumes (SQLite's write lock; docs/embedded-broker.md, "Paused processes"):
    a stall, not the lease expiry the scenario is about."""
    for _ in range(tries):
        os.kill(proc.pid, signal.SIGSTOP)
        probe = sqlite3.connect(str(path), timeout=0.5, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(proc.pid, signal.SIGCONT)  # paused holding the lock: let it finish, try again
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError(f"could not pause {proc.pid} outside a write transaction in {tries} tries")


def paused_consumer(harness: LocalHarness, pause_s: float = 6.0) -> Result:
    """Issue 20's sequence: A (prefetch 100, lease_timeout 1) holds 30; A is SIGSTOPped for
    *pause_s* while B runs; A resumes; 100 more are published; A is SIGKILLed; B drains;
    a fresh connection drains. Every confirmed id must reach B or the fresh connection."""
    result = Result()
    h = result.history
    queue, url = harness.new_queue(), harness.url()
    first = new_ids(30, "a")
    publish(url, queue, first, h)
    a_got: list[str] = []
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_CONSUMER, url, queue], stdout=subprocess.PIPE, text=True)
    reader = _lines(proc, a_got)
    drainer: Drainer | None = None
    try:
        eventually(lambda: len(a_got) >= 30, timeout=60, message="consumer A holding 30")
        drainer = Drainer(url, queue, h)
        drainer.start()
        pause_outside_write_lock(proc, harness.path)
        stopped = time.monotonic()
        h.injections += 1
        # A's lease expires after 1 s without a heartbeat: B gets A's 30.
        eventually(lambda: set(first) <= set(drainer.seen), timeout=60, message="B received A's 30")
        time.sleep(max(0.0, pause_s - (time.monotonic() - stopped)))  # the pause itself, not a wait for state
        assert not any(o.startswith(f"{proc.pid}-") for o in harness.owner_ids()), "A's owner record was not taken"
        os.kill(proc.pid, signal.SIGCONT)
        # A learns it was taken over and leases again only under a new owner id (generation 2).
        eventually(lambda: any(o.startswith(f"{proc.pid}-") and not o.endswith("-g1") for o in harness.owner_ids()),
                   timeout=30, message="A registered a new owner id")
        publish(url, queue, new_ids(100, "b"), h)
        eventually(lambda: harness.ready(queue) == 0, timeout=60, message="every new message leased")
        reap(proc, sig=signal.SIGKILL, readers=[reader])  # the kill under test; closes its stdout pipe
        confirmed = h.confirmed
        eventually(lambda: set(drainer.seen) >= confirmed, timeout=60, message="B drained everything")
    finally:
        reap(proc, readers=[reader])  # a no-op when the kill above ran
        if drainer is not None:
            drainer.stop()
    drain_fresh(url, queue, h)
    return result


COMPETING_CONSUMER = textwrap.dedent("""
    import sys, ackbridge
    with ackbridge.connect(sys.argv[1]) as conn:
        c = conn.consume(sys.argv[2], prefetch=16)
        while (d := c.get(timeout=3)) is not None:
            d.ack(); print(d.message_id, flush=True)
""")


def competing_consumers(harness: LocalHarness, n: int = 1000, processes: int = 3) -> Result:
    result = Result()
    h = result.history
    queue, url = harness.new_queue(), harness.url()
    publish(url, queue, new_ids(n), h, fsync=False)
    workers = [subprocess.Popen([sys.executable, "-c", COMPETING_CONSUMER, url, queue], stdout=subprocess.PIPE,
                                text=True) for _ in range(processes)]
    try:
        for worker in workers:
            out, _ = worker.communicate(timeout=300)
            h.delivered.update(out.split())
    finally:
        for worker in workers:
            reap(worker)  # exited already, unless a communicate() timed out
    drain_fresh(url, queue, h, quiet_s=0.5)
    return result


def heartbeat_failure(harness: LocalHarness, n: int = 200) -> Result:
    """The heartbeat fails for longer than the lease: the consumer ends its generation
    (held deliveries go stale), the heartbeat thread lives on, and the same consumer
    drains everything."""
    result = Result()
    h = result.history
    queue, url = harness.new_queue(), harness.url()
    publish(url, queue, new_ids(n), h, fsync=False)
    with ackbridge.connect(url, lease_timeout=1) as conn:
        consumer = conn.consume(queue, prefetch=50)
        held = [consumer.get(timeout=30) for _ in range(20)]
        generation = faults(conn).generation
        transport: Any = transport_of(conn)
        transport.fail_heartbeats(2.0)
        h.injections += 1
        eventually(lambda: faults(conn).generation > generation, timeout=30, message="generation ended")
        for delivery in held:
            assert delivery is not None
            try:
                delivery.ack()
                h.delivered[str(delivery.message_id)] += 1
            except StaleDeliveryError as exc:
                h.stale_refused += 1
                result.note("ack of a held delivery", exc)
        deadline = time.monotonic() + 60
        while not set(h.delivered) >= h.confirmed and time.monotonic() < deadline:
            delivery = consumer.get(timeout=1)
            if delivery is None:
                continue
            try:
                delivery.ack()
                h.delivered[str(delivery.message_id)] += 1
            except StaleDeliveryError:
                h.stale_refused += 1
        alive = {t.name for t in threading.enumerate()}
        if "ackbridge-local-heartbeat" not in alive:
            result.thread_deaths.append("the heartbeat thread is gone")
    return result


def disk_full(n: int = 500) -> Result:
    """The disk fills up while a consumer holds deliveries, then space returns: publishes
    are refused with SQLite's reason, acks raise StorageFullError, and the same live
    consumer then drains every confirmed message."""
    result = Result()
    h = result.history
    with damage.small_disk("8m") as disk:
        url = f"local://{disk / 'broker.db'}"
        publish(url, "q", new_ids(n), h, fsync=False)
        with ackbridge.connect(url, fsync=False) as conn:
            consumer = conn.consume("q", prefetch=50)
            held = [consumer.get(timeout=30) for _ in range(5)]
            filler = damage.fill(disk)
            h.injections += 1
            refused = []
            for message_id in new_ids(20, "full"):
                h.attempted.add(message_id)
                refused.append(conn.publish("q", message_id.encode(), message_id=message_id))
            conn.flush(timeout=60)
            for confirm in refused:
                assert confirm.outcome is not None
                h.outcome(str(confirm.message_id), confirm.outcome.status)
                if confirm.outcome.status is ConfirmStatus.REFUSED:
                    result.errors.append(f"publish refused: {confirm.outcome.reason}")
            for delivery in held:
                assert delivery is not None
                try:
                    delivery.ack()
                    h.delivered[str(delivery.message_id)] += 1
                except (StorageFullError, StaleDeliveryError) as exc:
                    result.note("ack", exc)
            filler.unlink()
            deadline = time.monotonic() + 120
            while not set(h.delivered) >= h.confirmed and time.monotonic() < deadline:
                delivery = consumer.get(timeout=1)
                if delivery is None:
                    continue
                try:
                    delivery.ack()
                    h.delivered[str(delivery.message_id)] += 1
                except StaleDeliveryError:
                    h.stale_refused += 1
    return result


class ThreadDeaths:
    """Collects exceptions that escape any thread while in use."""

    def __init__(self, into: list[str]) -> None:
        self.into = into
        self._old: Any = None

    def __enter__(self) -> ThreadDeaths:
        self._old = threading.excepthook
        threading.excepthook = lambda args: self.into.append(f"{args.thread}: {args.exc_type.__name__}")
        return self

    def __exit__(self, *exc: object) -> None:
        threading.excepthook = self._old


def _expect(result: Result, where: str, call: Any) -> None:
    try:
        call()
    except AckbridgeError as exc:
        result.note(where, exc)
    else:
        result.errors.append(f"{where}: NO ERROR")


def corrupt_file(harness: LocalHarness, n: int = 300) -> Result:
    """Pages of the messages table are overwritten under an open connection: consume,
    settle and close raise DamagedFileError naming the file; no thread dies; nothing
    more is confirmed; a new connection is refused with the same typed error."""
    result = Result()
    h = result.history
    queue, url = harness.new_queue(), harness.url()
    publish(url, queue, new_ids(n), h, fsync=False)
    before = set(h.confirmed)
    with ThreadDeaths(result.thread_deaths), _quiet():
        conn = ackbridge.connect(url, fsync=False)
        consumer = conn.consume(queue, prefetch=10)
        held = consumer.get(timeout=30)
        assert held is not None
        damage.corrupt_message_pages(harness.path)
        h.injections += 1
        _expect(result, "consume", lambda: conn.consume(queue))
        _expect(result, "ack", held.ack)
        late = conn.publish(queue, b"late", message_id="late")
        h.attempted.add("late")
        conn.flush(timeout=30)
        assert late.outcome is not None
        h.outcome("late", late.outcome.status)
        _expect(result, "close", conn.close)
        _expect(result, "connect", lambda: ackbridge.connect(url).close())
    result.destroyed = len(before - set(h.delivered))
    return result


def deleted_file(harness: LocalHarness, n: int = 300) -> Result:
    """The broker file is deleted under an open connection: the connection notices
    (heartbeat, and before every commit), refuses publishes, raises from settle and
    close; a new connection is refused instead of starting an empty broker."""
    result = Result()
    h = result.history
    queue, url = harness.new_queue(), harness.url()
    publish(url, queue, new_ids(n), h, fsync=False)
    before = set(h.confirmed)
    with ThreadDeaths(result.thread_deaths), _quiet():
        conn = ackbridge.connect(url, lease_timeout=2)
        consumer = conn.consume(queue, prefetch=10)
        held = consumer.get(timeout=30)
        assert held is not None
        harness.cleanup()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{harness.path}{suffix}").unlink(missing_ok=True)
        h.injections += 1
        transport: Any = transport_of(conn)
        eventually(lambda: transport.failure is not None, timeout=30, message="deletion noticed")
        result.note("background check", transport.failure)
        late = conn.publish(queue, b"late", message_id="late")
        h.attempted.add("late")
        conn.flush(timeout=30)
        assert late.outcome is not None
        h.outcome("late", late.outcome.status)
        if late.outcome.status is ConfirmStatus.REFUSED:
            result.errors.append(f"publish refused: {late.outcome.reason}")
        _expect(result, "ack", held.ack)
        _expect(result, "consume", lambda: conn.consume(queue))
        _expect(result, "close", conn.close)
        _expect(result, "connect", lambda: ackbridge.connect(url).close())
    result.destroyed = len(before - set(h.delivered))
    return result


class _quiet:
    """The broker logs damage at ERROR on purpose; keep scenario output readable."""

    def __enter__(self) -> None:
        self.level = logging.getLogger("ackbridge.local").level
        logging.getLogger("ackbridge.local").setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("ackbridge.local").setLevel(self.level)


__all__ = ["DamagedFileError", "Result", "StorageFullError", "competing_consumers", "corrupt_file", "deleted_file",
           "disk_full", "heartbeat_failure", "paused_consumer"]
