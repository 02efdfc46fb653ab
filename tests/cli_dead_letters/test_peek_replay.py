"""``ackbridge dead-letters peek`` and ``replay`` on real brokers, 100 messages each,
checked on the broker's side before and after: peek leaves every count as it was,
replay moves all 100 back with each id exactly once, and a publish the broker refuses
leaves its dead letter where it was (docs/dead-letters.md)."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import (
    ATTEMPT,
    FAILURE_REASON,
    FIRST_FAILURE,
    LAST_FAILURE,
    ORIGINAL_ID,
    ORIGINAL_QUEUE,
)
from ackbridge.pipeline.headers import epoch_of
from tests.cli_dead_letters.harness import (
    ACKBRIDGE,
    COUNT,
    cleanup,
    cli_json,
    dead_letter_by_policy,
    dead_letter_by_reject,
    drain_ids,
    live_rabbit_depth,
    publish,
    wait_depths,
)
from tests.pipeline.brokers import BROKERS, broker, queue_name, raw_dead_letter, wait_for


def _check_documented_headers(headers: dict[str, Any], queue: str) -> None:
    assert headers[ORIGINAL_QUEUE] == queue
    assert int(headers[ATTEMPT]) == 1
    assert str(headers[FAILURE_REASON]).startswith("ValueError: cannot parse order m-")
    assert epoch_of(str(headers[FIRST_FAILURE])) <= epoch_of(str(headers[LAST_FAILURE]))
    assert str(headers[ORIGINAL_ID]).startswith("m-")


@pytest.mark.parametrize("where", BROKERS)
def test_peek_then_replay_moves_100_policy_dead_letters_back(where: str, tmp_path: Path) -> None:
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("cli-dl")
        conn.declare_queue(queue)
        try:
            ids = publish(conn, queue)
            dead_letter_by_policy(conn, queue)
            wait_depths(b, conn, queue, main=0, dead=COUNT)
            if b.name == "rabbitmq":
                # A foreign client reads the documented set on a dead-lettered message.
                body, raw = raw_dead_letter(queue + ".dlq")
                assert body.startswith(b"body ")
                _check_documented_headers(raw, queue)

            peeked = cli_json("peek", b.url, "-q", queue, "-n", str(COUNT), cwd=tmp_path)
            assert peeked["dead_letter_queue"] == queue + ".dlq"
            assert sorted(m["id"] for m in peeked["messages"]) == sorted(f"{i}~dead" for i in ids)
            for shown in peeked["messages"]:
                _check_documented_headers(shown["headers"], queue)
            # Peeking removed nothing: the broker holds what it held.
            wait_depths(b, conn, queue, main=0, dead=COUNT)

            replayed = cli_json("replay", b.url, "-q", queue, cwd=tmp_path)
            assert (replayed["replayed"], replayed["left"], replayed["to"]) == (COUNT, 0, {queue: COUNT})
            wait_depths(b, conn, queue, main=COUNT, dead=0)
            carried: list[dict[str, Any]] = []
            seen = drain_ids(conn, queue, headers=carried)
            assert seen == Counter({f"{i}~dead": 1 for i in ids})  # each exactly once, none else
            # The history travels; the attempt count does not (a fresh set of attempts).
            assert all(ATTEMPT not in c and c[ORIGINAL_QUEUE] == queue for c in carried)
            wait_depths(b, conn, queue, main=0, dead=0)
        finally:
            cleanup(b, conn, queue)


@pytest.mark.parametrize("where", BROKERS)
def test_peek_then_replay_moves_100_rejected_messages_back(where: str, tmp_path: Path) -> None:
    """Dead-lettered by reject(): no policy headers; what the broker wrote is shown
    (RabbitMQ x-death, the NATS plugin's marks), and replay sends them to QUEUE."""
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("cli-rej")
        conn.declare_queue(queue)
        try:
            ids = publish(conn, queue)
            dead_letter_by_reject(conn, queue)
            wait_depths(b, conn, queue, main=0, dead=COUNT)

            peeked = cli_json("peek", b.url, "-q", queue, "-n", "5", cwd=tmp_path)
            assert peeked["shown"] == 5
            for shown in peeked["messages"]:
                assert shown["headers"] == {}
                if b.name == "rabbitmq":
                    assert shown["id"] in ids
                    assert (shown["broker"]["x-death.queue"], shown["broker"]["x-death.reason"]) == (queue, "rejected")
                if b.name == "nats":
                    assert shown["broker"]["ackbridge-dead-lettered-from"] == queue
                    assert shown["broker"]["ackbridge-original-message-id"] in ids
            wait_depths(b, conn, queue, main=0, dead=COUNT)

            replayed = cli_json("replay", b.url, "-q", queue, cwd=tmp_path)
            assert (replayed["replayed"], replayed["left"]) == (COUNT, 0)
            wait_depths(b, conn, queue, main=COUNT, dead=0)
            seen = drain_ids(conn, queue)
            assert sum(seen.values()) == COUNT and set(seen.values()) == {1}
            if b.name != "nats":  # JetStream's dead-letter copy has an id of its own (dlq-<stream>-<seq>)
                assert set(seen) == set(ids)
        finally:
            cleanup(b, conn, queue)


@pytest.mark.rabbitmq
def test_replay_refused_by_the_broker_leaves_every_dead_letter_in_place(tmp_path: Path) -> None:
    """Dead letters whose original queue is gone: each publish is refused (NO_ROUTE),
    so none is acked; the summary counts them with the broker's reason."""
    with broker("rabbitmq") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("cli-gone")
        conn.declare_queue(queue)
        try:
            publish(conn, queue + ".dlq", 20, headers={ORIGINAL_QUEUE: queue + "-deleted"})
            wait_depths(b, conn, queue, main=0, dead=20)
            replayed = cli_json("replay", b.url, "-q", queue, "--idle", "1", cwd=tmp_path, code=1)
            assert (replayed["replayed"], replayed["left"]) == (0, 20)
            assert "NO_ROUTE" in replayed["why"][0]["why"] and replayed["why"][0]["to"] == queue + "-deleted"
            wait_depths(b, conn, queue, main=0, dead=20)
        finally:
            cleanup(b, conn, queue)


@pytest.mark.rabbitmq
def test_replay_interrupted_by_sigint_loses_nothing(tmp_path: Path) -> None:
    """SIGINT while replay works (one dead letter in flight at a time): every message is
    in the queue or still in the dead-letter queue; at worst one is in both."""
    with broker("rabbitmq") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("cli-int")
        conn.declare_queue(queue)
        try:
            ids = publish(conn, queue)
            dead_letter_by_reject(conn, queue)
            wait_depths(b, conn, queue, main=0, dead=COUNT)
            run = subprocess.Popen([ACKBRIDGE, "dead-letters", "replay", b.url, "-q", queue, "--prefetch", "1",
                                    "--json"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_for(lambda: (live_rabbit_depth(queue) or 0) > 0, "replay to have moved a first message")
            run.send_signal(signal.SIGINT)
            out, err = run.communicate(timeout=120)
            print(out)  # how far it came: the summary of an interrupted replay
            in_queue = drain_ids(conn, queue)
            in_dlq = drain_ids(conn, queue + ".dlq")
            assert set(in_queue) | set(in_dlq) == set(ids), (out, err)  # nothing lost
            assert set(in_queue.values()) == {1} and set(in_dlq.values()) <= {1}
            assert len(set(in_queue) & set(in_dlq)) <= 1  # at worst the one between confirm and ack
        finally:
            cleanup(b, conn, queue)


@pytest.mark.parametrize("where", BROKERS)
def test_a_replayed_message_that_fails_again_is_dead_lettered_again(where: str, tmp_path: Path) -> None:
    """Replayed, failing again: its new dead-letter copy must be a new message. With the
    first id carried, the copy's id was `m~dead` again, which JetStream drops as a
    duplicate within its duplicate_window while confirming it: the message was lost."""
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("cli-dl-again")
        conn.declare_queue(queue)
        try:
            publish(conn, queue, 20)
            dead_letter_by_policy(conn, queue, 20)
            wait_depths(b, conn, queue, main=0, dead=20)
            replayed = cli_json("replay", b.url, "-q", queue, cwd=tmp_path)
            assert replayed["replayed"] == 20
            wait_depths(b, conn, queue, main=20, dead=0)
            dead_letter_by_policy(conn, queue, 20)
            wait_depths(b, conn, queue, main=0, dead=20)
        finally:
            cleanup(b, conn, queue)
