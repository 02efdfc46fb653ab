"""NATS JetStream topology: ``purge`` and ``delete`` through the library and the CLI,
checked on the server with a raw nats-py client (stream state, stream existence)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import NotFoundError

import ackbridge
from ackbridge.errors import BrokerError
from tests.conftest import require_port
from tests.topology.test_topology_cli import ok_json

URL = "nats://127.0.0.1:4222"


@pytest.fixture
def server() -> Iterator[Any]:
    require_port(4222, "NATS (JetStream)")
    from tests.nats.harness import NatsHarness

    harness = NatsHarness()
    try:
        yield harness
    finally:
        harness.cleanup()


def stream_exists(server: Any, subject: str) -> bool:
    from ackbridge_nats.naming import stream_name

    raw = server.raw
    try:
        raw.run(lambda: raw.client.jsm().stream_info(stream_name(subject)))
    except NotFoundError:
        return False
    return True


@pytest.mark.nats
def test_purge_drops_what_the_stream_holds_and_delete_removes_both_streams(server: Any, tmp_path: Path) -> None:
    from ackbridge_nats.naming import DEFAULT_DEAD_LETTER_SUBJECT, dead_letter_subject, stream_name

    subject = f"topo.{uuid.uuid4().hex[:8]}"
    dlq = dead_letter_subject(DEFAULT_DEAD_LETTER_SUBJECT, subject)
    server.streams += [stream_name(subject), stream_name(dlq)]
    with ackbridge.connect(URL) as conn:
        conn.declare_queue(subject)
        for n in range(25):
            assert conn.publish(subject, b"x", message_id=str(n)).result().confirmed
        assert server.stream_messages(subject) == 25
        assert conn.purge_queue(subject) == 25
        assert server.stream_messages(subject) == 0
        assert conn.purge_queue(subject) == 0
    # The CLI: the same verbs, its JSON reporting the server's count.
    assert ok_json("publish", URL, "-q", subject, "-n", "7", cwd=tmp_path)["confirmed"] == 7
    assert ok_json("purge", URL, "-q", subject, cwd=tmp_path)["messages"] == 7
    assert ok_json("delete", URL, "-q", subject, cwd=tmp_path)["deleted"] == subject
    assert not stream_exists(server, subject) and not stream_exists(server, dlq)
    with ackbridge.connect(URL) as conn:
        conn.delete_queue(subject)  # already gone: not an error
        with pytest.raises(BrokerError, match="declare_queue"):
            conn.purge_queue(subject)


@pytest.mark.nats
def test_delete_and_purge_refuse_a_stream_ackbridge_did_not_declare(server: Any) -> None:
    """A stream storing the subject among others belongs to someone else: deleting or
    purging it would take their messages, so both are refused and it stays."""
    base = f"topo.{uuid.uuid4().hex[:8]}"
    foreign = f"FOREIGN_{uuid.uuid4().hex[:8]}"
    raw = server.raw
    raw.run(lambda: raw.client.jsm().add_stream(StreamConfig(name=foreign, subjects=[f"{base}.a", f"{base}.b"],
                                                             storage=StorageType.MEMORY)))
    server.streams.append(foreign)
    with ackbridge.connect(URL) as conn:
        for verb in (lambda: conn.delete_queue(f"{base}.a", dead_letter=False), lambda: conn.purge_queue(f"{base}.a")):
            with pytest.raises(BrokerError, match="did not declare"):
                verb()
    assert raw.run(lambda: raw.client.jsm().stream_info(foreign)).config.name == foreign


@pytest.mark.nats
def test_a_stream_named_like_ackbridges_but_storing_more_is_refused(server: Any) -> None:
    from ackbridge_nats.naming import stream_name

    base = f"topo.{uuid.uuid4().hex[:8]}"
    named = stream_name(f"{base}.a")
    raw = server.raw
    raw.run(lambda: raw.client.jsm().add_stream(StreamConfig(name=named, subjects=[f"{base}.a", f"{base}.b"],
                                                             storage=StorageType.MEMORY)))
    server.streams.append(named)
    with ackbridge.connect(URL) as conn, pytest.raises(BrokerError, match="only the streams declare_queue made"):
        conn.delete_queue(f"{base}.a", dead_letter=False)
    assert raw.run(lambda: raw.client.jsm().stream_info(named)).config.name == named
