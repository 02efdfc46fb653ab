"""SIGTERM to a service with 200 prefetched deliveries and a slow handler: drain() gives
back what it did not process, dead-letters nothing, acks nothing unprocessed (issue 36, item 4).

A child process (``drain_app.py``) consumes with a handler (sync or asyncio) that works
``WORK_MS`` per delivery, records the id it finished to a file, then acks. All ``N``
messages are prefetched before the signal. On SIGTERM it calls ``consumer.drain()``.
Then the broker is read: nothing unacked, nothing dead-lettered, and every published
id is either processed (once) or back in the queue -- never both, never neither
(queue depth + processed = N). The delivery being worked on when the signal came
finishes and is acked (not handed back). What a handed-back delivery carries when
it comes again is asserted per broker (the delivery count each broker keeps).

The CLI row sends SIGTERM to ``ackbridge consume`` (``--work-ms``) the same way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.testing import BrokerHarness, eventually
from tests.conftest import require_port

APP = Path(__file__).with_name("drain_app.py")
ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))
N, PREFETCH, WORK_MS = 200, 200, 50


@pytest.fixture(params=["rabbitmq", "nats", "embedded"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerHarness]:
    found: BrokerHarness
    if request.param == "rabbitmq":
        require_port(5672, "RabbitMQ")
        from tests.rabbitmq.harness import RabbitHarness

        found = RabbitHarness()
    elif request.param == "nats":
        require_port(4222, "nats-server (JetStream)")
        from tests.nats.harness import NatsHarness

        found = NatsHarness()
    else:
        from tests.local.harness import LocalHarness

        found = LocalHarness(tmp_path)
    try:
        yield found
    finally:
        found.cleanup()


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def publish_ids(harness: BrokerHarness, queue: str, prefix: str) -> list[str]:
    ids = [f"{prefix}-{i}-{uuid.uuid4().hex[:6]}" for i in range(N)]
    with ackbridge.connect(harness.url(), reconnect=False, **harness.connect_options()) as conn:
        confirms = [conn.publish(harness.publish_target(queue), i.encode(), message_id=i) for i in ids]
        assert all(c.result(10).confirmed for c in confirms)
    return ids


def take_back(harness: BrokerHarness, queue: str, expected: int) -> list[tuple[str, bool, int | None]]:
    """Take and ack what *queue* holds: (id, redelivered, delivery_count) of each."""
    found: list[tuple[str, bool, int | None]] = []
    with ackbridge.connect(harness.url(), prefetch=500, reconnect=False, **harness.connect_options()) as conn:
        with conn.consume(queue) as consumer:
            while True:
                delivery = consumer.get(timeout=1 if len(found) >= expected else 10)
                if delivery is None:
                    break
                found.append((delivery.body.decode(), delivery.redelivered, delivery.delivery_count))
                delivery.ack()
    return found


def settle_down(harness: BrokerHarness, queue: str, child: subprocess.Popen[bytes], log: Path) -> None:
    try:
        rc = child.wait(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert rc == 0, f"the service did not exit cleanly after its drain: {log.read_text()[-1500:]}"


def left_on_broker(harness: BrokerHarness, queue: str) -> int:
    """Messages the queue holds for the next consumer, once the service is gone."""
    if harness.name == "nats-jetstream":
        # A -NAKed message stays in num_ack_pending until it is delivered again (nats-server
        # keeps it in the consumer's pending set, queued for redelivery): count both.
        # take_back() then proves they come back at once, not after ack_wait (30 s).
        return harness.ready(queue) + harness.unacked(queue)
    # Its connection is closed: the broker has taken back whatever it held unsettled.
    eventually(lambda: harness.unacked(queue) == 0, timeout=30, message="no delivery left unacked")
    return harness.ready(queue)


def check_broker(harness: BrokerHarness, queue: str, ids: list[str], processed: list[str]) -> dict[str, Any]:
    """The rows every variant must pass, read from the broker; what was taken back."""
    assert harness.dead_lettered(queue) == [], "a drain dead-lettered a healthy message"
    twice = [i for i, n in Counter(processed).items() if n > 1]
    assert not twice, f"processed twice: {twice}"
    depth = left_on_broker(harness, queue)
    assert depth + len(processed) == N, f"queue depth {depth} + processed {len(processed)} != {N}"
    back = take_back(harness, queue, depth)
    back_ids = [b[0] for b in back]
    assert not set(back_ids) & set(processed), "processed (and acked) yet still in the queue"
    assert sorted(back_ids + processed) == sorted(ids), "an id neither processed nor back in the queue"
    return {"depth": depth, "back": back}


def check_delivery_counts(harness: BrokerHarness, back: list[tuple[str, bool, int | None]]) -> None:
    """What a prefetched delivery handed back carries when it comes again, per broker
    (docs/running-in-production.md, "Shutting down")."""
    if harness.name.startswith("rabbitmq"):
        # Classic queues count nothing; the redelivered flag is set (the broker did deliver it).
        assert all(redelivered and count is None for _, redelivered, count in back), back[:3]
    else:
        # JetStream and the embedded broker count every delivery: a handed-back one comes again as the 2nd.
        assert all(count == 2 for _, _, count in back), back[:3]


@pytest.mark.slow
@pytest.mark.parametrize("face", ["sync", "async"])
def test_sigterm_drains_200_prefetched_deliveries(harness: BrokerHarness, face: str) -> None:
    queue = harness.new_queue()
    ids = publish_ids(harness, queue, f"drain-{face}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="ab-drain-") as tmp:
        out = Path(tmp)
        with (out / "child.log").open("w") as log:
            child = subprocess.Popen(
                [sys.executable, str(APP), harness.url(), queue, tmp, face, str(PREFETCH), str(WORK_MS),
                 json.dumps(harness.connect_options())], cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                # Every message prefetched (none ready on the broker) and the handler under way.
                eventually(lambda: (out / "ready").exists() and len(_lines(out / "processed")) >= 5
                           and harness.ready(queue) == 0, timeout=60, message="all prefetched, work under way")
                assert len(_lines(out / "processed")) < N // 2, "the handler is too fast for this row"
                child.send_signal(signal.SIGTERM)
            finally:
                settle_down(harness, queue, child, out / "child.log")
        processed = _lines(out / "processed")
        status = json.loads((out / "status.json").read_text())
    assert status["ackbridge"].startswith(str(Path(__file__).resolve().parents[2])), status
    seen = check_broker(harness, queue, ids, processed)
    # The delivery in the handler's hands when the signal came was finished and acked.
    in_flight = status["in_flight_at_signal"]
    if in_flight is not None:
        assert in_flight in processed, f"the in-flight delivery was not finished: {status}"
    assert status["abandoned"] == 0, status
    # What was prefetched and never handed to the handler went back unsettled (the
    # delivery count of those the broker delivered to the service rises where it counts).
    assert status["handed_back"] >= 1, status
    check_delivery_counts(harness, [b for b in seen["back"] if b[1] or (b[2] or 1) > 1])


@pytest.mark.slow
def test_cli_consume_drains_on_sigterm(harness: BrokerHarness, tmp_path: Path) -> None:
    queue = harness.new_queue()
    publish_ids(harness, queue, "cli")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLUMNS"] = "200"
    with (tmp_path / "cli.log").open("w") as err:
        child = subprocess.Popen([ACKBRIDGE, "consume", harness.url(), "-q", queue, "-n", str(N), "--prefetch",
                                  str(PREFETCH), "--work-ms", str(WORK_MS), "--idle", "30", "--json"],
                                 cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err)
        try:
            # Consuming (all prefetched) and some settled.
            eventually(lambda: harness.ready(queue) == 0 and harness.unacked(queue) < N - 5, timeout=60,
                       message="the CLI consuming")
            child.send_signal(signal.SIGTERM)
            stdout, _ = child.communicate(timeout=90)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 0, (tmp_path / "cli.log").read_text()[-1500:]
    summary = json.loads(stdout)
    assert summary["stopped_by"] == "SIGTERM" and summary["abandoned"] == 0, summary
    assert summary["received"] == summary["settled"] < N, summary
    assert harness.dead_lettered(queue) == []
    assert left_on_broker(harness, queue) + summary["settled"] == N, summary
