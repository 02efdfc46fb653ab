"""The consumer-role workload: publish unique ids with confirms, consume and ack
them while a fault is injected, drain fully, and hand the history to the checker.

Every loop is bounded by a deadline; every fault is injected a counted number of times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import ackbridge
from ackbridge.errors import AckbridgeError, StaleDeliveryError
from ackbridge.testing import BrokerHarness
from ackbridge.testing.proxy import FaultProxy
from tests.scoreboard.checker import History

CONSUMER_FAULTS = ("none", "connection-cut", "tcp-reset", "blackhole", "cut-mid-frame", "consumer-sigkill", "poison")
NETWORK_FAULTS = {"tcp-reset", "blackhole", "cut-mid-frame"}

_KILLED_CONSUMER = textwrap.dedent("""
    import sys, ackbridge
    url, queue, take = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = ackbridge.connect(url)
    consumer = conn.consume(queue, prefetch=50)
    for i in range(take):
        d = consumer.get(timeout=30)
        if d is None:
            break
        print(d.message_id or d.body.decode(), flush=True)
        if i % 2 == 0:
            d.ack()
    print("READY", flush=True)
    import time; time.sleep(600)
""")


class Cell:
    def __init__(self, harness: BrokerHarness, fault: str, n: int, *, proxied_url: Callable[[int], str] | None,
                 options: dict[str, Any] | None = None, deadline_s: float = 240.0,
                 online_consumer: bool = False, max_backlog: int | None = None) -> None:
        self.harness = harness
        self.fault = fault
        self.n = n
        self.proxied_url = proxied_url
        self.options = dict(harness.connect_options(), **(options or {}))
        self.deadline = time.monotonic() + deadline_s
        self.history = History()
        self.queue = harness.new_queue(dead_letter=True)
        self.proxy: FaultProxy | None = None
        self._cut_publish = False
        self._cut_consume = False
        # Brokers that drop what exceeds a per-session queue (Mosquitto: 1000) are
        # consumed while publishing, as a real MQTT consumer is.
        self.online_consumer = online_consumer
        # Producer-side back-pressure: never more than this many published and not yet
        # delivered (MQTT: stay under Mosquitto's 1000 queued per session).
        self.max_backlog = max_backlog
        self._published = threading.Event()

    def url(self) -> str:
        if self.fault in NETWORK_FAULTS:
            if self.proxied_url is None:
                raise RuntimeError(f"{self.harness.name} cannot be reached through a TCP proxy")
            if self.proxy is None:
                from tests.scoreboard.brokers import broker_port

                self.proxy = FaultProxy(broker_port(self.harness.url()))
            return self.proxied_url(self.proxy.port)
        return self.harness.url()

    def connect(self) -> ackbridge.Connection:
        return ackbridge.connect(self.url(), **self.options)

    # ---- phases ----------------------------------------------------------------------
    def run(self) -> History:
        started = time.monotonic()
        try:
            if self.online_consumer:
                publisher = threading.Thread(target=self._publish_all, name="scoreboard-publisher")
                publisher.start()
                self._consume()
                publisher.join(timeout=max(self.deadline - time.monotonic(), 0) + 30)
            else:
                self._publish()
                self._published.set()
                self._consume()
        finally:
            if self.proxy is not None:
                self.proxy.close()
        self.history.elapsed_s = time.monotonic() - started
        self._read_dead_letters()
        return self.history

    def _publish_all(self) -> None:
        try:
            self._publish()
        finally:
            self._published.set()

    def _wait_for_backlog_room(self) -> None:
        if self.max_backlog is None:
            return
        while (len(self.history.attempted) - len(self.history.delivered) >= self.max_backlog
               and time.monotonic() < self.deadline):
            time.sleep(0.01)

    def _publish(self) -> None:
        h = self.history
        ids = [f"{uuid.uuid4().hex[:8]}-{i}" for i in range(self.n)]
        if self.fault == "poison":
            ids.append(f"poison-{uuid.uuid4().hex[:8]}")
            h.expected_dead.add(ids[-1])
        pending = list(ids)
        while pending and time.monotonic() < self.deadline:
            conn = self.connect()
            confirms = []
            try:
                publisher = conn.publisher(window=200)
                for message_id in pending:
                    self._wait_for_backlog_room()
                    h.attempted.add(message_id)
                    confirms.append(publisher.publish(self.harness.publish_target(self.queue), message_id.encode(),
                                                      message_id=message_id))
                    if self.fault == "connection-cut" and len(confirms) == len(pending) // 2 and not self._cut_publish:
                        self._cut_publish = True
                        self.harness.break_connection(conn)
                        h.injections += 1
                publisher.flush(timeout=60)
            except AckbridgeError:
                pass  # outcomes below say what happened to each
            finally:
                try:
                    conn.close()
                except AckbridgeError:
                    pass
            for confirm in confirms:
                outcome = confirm.outcome
                if outcome is None:
                    h.indeterminate.add(str(confirm.message_id))
                else:
                    h.outcome(str(confirm.message_id), outcome.status)
            # Retry what was not confirmed (at-least-once producer): duplicates are allowed.
            pending = [m for m in pending if m not in h.confirmed]

    def _consume(self) -> None:
        h = self.history
        if self.fault == "consumer-sigkill":
            self._sigkilled_consumer()
        injected_at = max(1, self.n // 3)
        fault_end: float | None = None
        idle_rounds = 0
        while time.monotonic() < self.deadline:
            conn = None
            try:
                conn = self.connect()
                consumer = conn.consume(self.queue, prefetch=50, max_deliveries=3 if self.fault == "poison" else None)
                while time.monotonic() < self.deadline:
                    delivery = consumer.get(timeout=3.0)
                    if delivery is None:
                        if self._published.is_set():
                            break
                        continue
                    message_id = delivery.message_id or delivery.body.decode()
                    if message_id.startswith("poison-"):
                        delivery.requeue()  # the application keeps failing on it
                        continue
                    h.delivered[message_id] += 1
                    if fault_end is not None and h.recovery_s is None:
                        h.recovery_s = time.monotonic() - fault_end
                    if sum(h.delivered.values()) >= injected_at and not self._cut_consume:
                        self._cut_consume = True
                        fault_end = self._inject(conn)
                    try:
                        delivery.ack()
                    except StaleDeliveryError:
                        h.stale_refused += 1
                    if self.fault != "poison" and self._all_delivered():
                        break
            except AckbridgeError:
                pass  # reconnect below; unsettled deliveries come back from the broker
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except AckbridgeError:
                        pass
            if self._published.is_set() and set(h.delivered) >= h.confirmed - h.expected_dead:
                idle_rounds += 1
                if idle_rounds >= 2 or self.fault != "poison":
                    return

    def _all_delivered(self) -> bool:
        # Only meaningful once publishing is over (the confirmed set is final).
        return self._published.is_set() and set(self.history.delivered) >= self.history.confirmed

    def _inject(self, conn: ackbridge.Connection) -> float | None:
        h = self.history
        if self.fault in {"connection-cut"}:
            self.harness.break_connection(conn)
        elif self.fault == "tcp-reset" and self.proxy is not None:
            self.proxy.reset()
        elif self.fault == "blackhole" and self.proxy is not None:
            with self.proxy.blackholed():
                time.sleep(2.0)  # the fault's duration, not a wait for state
            self.proxy.reset()
        elif self.fault == "cut-mid-frame" and self.proxy is not None:
            self.proxy.cut_mid_frame(after_bytes=3)
        else:
            return None
        h.injections += 1
        return time.monotonic()

    def _sigkilled_consumer(self) -> None:
        h = self.history
        # It takes few enough that half of them unacked stays under any broker's
        # in-flight window (MQTT 3.1.1 ignores prefetch: Mosquitto sends 20).
        url = self.harness.url(**self.harness.connect_options())
        proc = subprocess.Popen([sys.executable, "-c", _KILLED_CONSUMER, url, self.queue,
                                 str(max(1, min(self.n // 4, 30)))], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ))
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.strip()
                if line == "READY":
                    break
                h.delivered[line] += 1
            os.kill(proc.pid, signal.SIGKILL)
            h.injections += 1
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()  # the pipe is ours to close (else a ResourceWarning at GC)

    def _read_dead_letters(self) -> None:
        for body in self.harness.dead_lettered(self.queue):
            self.history.dead_lettered.add(body.decode("utf-8", "replace"))
