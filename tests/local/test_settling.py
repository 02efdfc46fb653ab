"""Settling on the embedded broker: a settle changes its rows all or nothing, only while
this owner still holds them, and has committed when it returns (issue 39 made one row's
settle a single autocommitted statement; these hold that path to the same rules)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge import StaleDeliveryError
from ackbridge.messages import WireSettle, WireVerb
from ackbridge.testing import eventually
from ackbridge.testing.processes import reap
from tests.local.harness import LocalHarness
from tests.local.rows import (
    ack_of,
    bodies_in,
    delivered,
    one,
    publish,
    rows_with,
    take_lease,
    transport_on,
    write_lock_held,
)

THREADS = 8


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[LocalHarness]:
    made = LocalHarness(tmp_path)
    yield made
    made.cleanup()


@pytest.mark.parametrize("verb", [WireVerb.ACK, WireVerb.REQUEUE])
def test_a_single_settle_whose_lease_was_taken_is_refused(harness: LocalHarness, verb: WireVerb) -> None:
    """One op alone takes the one-statement path: it must tell a lost lease too."""
    queue = harness.new_queue()
    publish(harness, queue, [b"a"])
    with transport_on(harness, queue) as (transport, events):
        [lost] = delivered(events, 1)
        take_lease(harness.path, b"a")
        with pytest.raises(StaleDeliveryError, match="lease"):
            transport.settle([WireSettle(verb, lost.wire_tag, lost.generation, "s", False, lost)])
        assert rows_with(harness.path, b"a") == 1
        assert events.ended == [1], "the owner that lost a lease kept its generation"


def test_a_settle_with_one_lease_taken_applies_none_of_its_rows(harness: LocalHarness) -> None:
    queue = harness.new_queue()
    publish(harness, queue, [b"a", b"b"])
    with transport_on(harness, queue) as (transport, events):
        messages = delivered(events, 2)
        take_lease(harness.path, b"a")
        with pytest.raises(StaleDeliveryError, match="lease"):
            transport.settle(ack_of(one(messages, b"b")) + ack_of(one(messages, b"a")))
        assert rows_with(harness.path, b"b") == 1, "part of a refused settle was applied"
        assert rows_with(harness.path, b"a") == 1
        assert events.ended == [1], "the owner that lost a lease kept its generation"


ACKER = textwrap.dedent("""
    import sys, threading, ackbridge
    url, queue, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = ackbridge.connect(url)
    out = threading.Lock()

    def work():
        consumer = conn.consume(queue, prefetch=50)
        while (delivery := consumer.get(timeout=30)) is not None:
            delivery.ack()
            with out:
                sys.stdout.write(delivery.body.decode() + "\\n")
                sys.stdout.flush()

    for _ in range(threads):
        threading.Thread(target=work, daemon=True).start()
    threading.Event().wait()
""")


def drain(url: str, queue: str, get_timeout: float = 2.0) -> set[str]:
    seen: set[str] = set()
    with ackbridge.connect(url) as conn:
        consumer = conn.consume(queue, prefetch=500)
        while (delivery := consumer.get(timeout=get_timeout)) is not None:
            seen.add(delivery.body.decode())
            delivery.ack()
    return seen


def test_an_ack_that_returned_survives_a_sigkill_of_its_process(harness: LocalHarness) -> None:
    """A child acks on THREADS threads and prints each ack after it returned; SIGKILLed
    while its acks wait for a commit, none of what it printed may come back."""
    queue = harness.new_queue()
    total = 20_000
    publish(harness, queue, [f"m{i}".encode() for i in range(total)])
    child = subprocess.Popen([sys.executable, "-c", ACKER, harness.url(), queue, str(THREADS)],
                             stdout=subprocess.PIPE, text=True)
    printed: list[str] = []

    def read(stream: Any) -> None:
        for line in stream:
            printed.append(line.strip())

    # Read all along, so the child never stalls on a full pipe: it stops only in ack().
    reader = threading.Thread(target=read, args=(child.stdout,), daemon=True)
    reader.start()
    try:
        eventually(lambda: len(printed) >= 1000, timeout=60, interval=0.001, message="1000 acks printed")
        # The kill lands while acks wait for a commit: the file's write lock is held
        # for the fault's length, then the child dies with every thread inside ack().
        with write_lock_held(harness.path):
            time.sleep(0.5)
            child.send_signal(signal.SIGKILL)
            child.wait(30)
    finally:
        reap(child, readers=[reader])
    acked = set(printed)
    acked.discard("")
    assert 1000 <= len(acked) < total, "the child finished before the kill: nothing was tested"
    resurrected = sorted(acked & bodies_in(harness.path, queue))
    assert not resurrected, f"{len(resurrected)} acked message(s) still in the file: {resurrected[:5]}"
    # The killed consumer's leases come back (its pid is gone); none of them is one it acked.
    drained = drain(harness.url(), queue)
    assert not acked & drained
    assert total - THREADS <= len(acked | drained) <= total  # at most the in-flight acks unprinted
    assert harness.ready(queue) == 0 and harness.unacked(queue) == 0
