"""The guard around the transport's use of nats-py internals, and the fast path against
nats-py's public one: the same messages reach a subscriber, in the same order, and the
client's counters move alike."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

import ackbridge
from ackbridge.testing.faults import transport_of
from ackbridge_nats import dispatch, fastpath, wire
from ackbridge_nats.dispatch import DirectQueue
from tests.fastpath_env import CASES, check_env_switch
from tests.nats.harness import HOST, PORT, NatsHarness

pytestmark = pytest.mark.nats


def test_the_installed_nats_py_carries_the_fast_path() -> None:
    assert fastpath.installed_version() == fastpath.NATS_VERSION
    assert fastpath.check().available
    assert fastpath.SUPPORT.available


def test_another_nats_py_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not fastpath.check("2.16.0").available
    monkeypatch.setattr(fastpath, "installed_version", lambda: "2.9.0")
    found = fastpath.check()
    assert not found.available
    assert "nats-py 2.9.0" in found.reason and fastpath.NATS_VERSION in found.reason


def test_an_internal_no_longer_used_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def send_command(self: Any, cmd: bytes, priority: bool = False) -> None:  # keeps its buffer elsewhere
        self._outbox.append(cmd)

    monkeypatch.setattr(Client, "_send_command", send_command)
    found = fastpath.check()
    assert not found.available
    assert "_send_command" in found.reason and "_pending" in found.reason


@pytest.mark.parametrize(("value", "fast"), CASES)
def test_the_environment_variable_forces_the_public_path(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                         fast: bool) -> None:
    check_env_switch(fastpath, monkeypatch, value, fast)


def _on_raw_client(scenario: Callable[[Client], Awaitable[None]]) -> None:
    async def run() -> None:
        client = await nats.connect(f"nats://{HOST}:{PORT}")
        try:
            await scenario(client)
        finally:
            await client.close()

    asyncio.run(run())


async def _wait_for(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not condition():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("direct", [True, False])
def test_settlement_publishes_reach_the_server_as_the_public_path_sends_them(direct: bool) -> None:
    """wire.publish_all, fast and public: every publish arrives, in order, bodies intact,
    and the client's out_msgs/out_bytes count them as Client.publish counts them."""
    subject = f"abfast.{uuid.uuid4().hex[:10]}"
    publishes = [(subject, b"+ACK"), (subject, b"-NAK"), (subject, b'-NAK {"delay": 5000000000}'),
                 (subject, b"")] * 50

    async def scenario(client: Client) -> None:
        got: list[bytes] = []

        async def on_msg(msg: Msg) -> None:
            got.append(msg.data)

        await client.subscribe(subject, cb=on_msg)
        await client.flush()
        before = dict(client.stats)
        await wire.publish_all(client, publishes, direct=direct)
        # The flusher is kicked: they leave now, not with whatever the client writes next (a
        # PONG to the server's first PING would take them along ~2 s later).
        assert client._flush_queue is not None and not client._flush_queue.empty()
        await _wait_for(lambda: len(got) == len(publishes), f"{len(got)} of {len(publishes)} arrived")
        assert got == [body for _subject, body in publishes]
        assert client.stats["out_msgs"] - before["out_msgs"] == len(publishes)
        assert client.stats["out_bytes"] - before["out_bytes"] == sum(len(body) for _s, body in publishes)

    _on_raw_client(scenario)


def test_a_direct_subscription_hands_messages_over_in_order_and_survives_a_failing_handler(
        caplog: pytest.LogCaptureFixture) -> None:
    """Messages without headers reach the plain handler from the parser (no Msg), those with
    headers the Msg handler: one order across both, counted as nats-py counts, and one
    handler's exception is logged, not the end of the connection."""
    subject = f"abdirect.{uuid.uuid4().hex[:10]}"
    reply = f"abreply.{uuid.uuid4().hex[:10]}"

    async def scenario(client: Client) -> None:
        got: list[tuple[str, bytes, str]] = []

        def handler(msg: Msg) -> None:
            got.append(("msg", msg.data, msg.reply))

        def plain(subject_: bytes, reply_: bytes, data: bytes) -> None:
            assert subject_.decode() == subject
            if data == b"boom":
                raise RuntimeError("a handler's bug")
            got.append(("plain", data, reply_.decode()))

        sub = await dispatch.subscribe(client, subject, handler, plain, direct=True)
        assert isinstance(sub._pending_queue, DirectQueue)
        assert sub._wait_for_msgs_task is None  # no task per subscription, no coroutine per message
        await client.flush()
        before = dict(client.stats)
        expected: list[tuple[str, bytes, str]] = []
        for i in range(200):
            body = b"%d" % i
            if i % 10 == 3:  # with a header: nats-py's own path, then the Msg handler
                await client.publish(subject, body, reply=reply, headers={"k": "v"})
                expected.append(("msg", body, reply))
            elif i % 10 == 7:  # no reply subject: nats-py's own path too
                await client.publish(subject, body)
                expected.append(("msg", body, ""))
            else:
                await client.publish(subject, body, reply=reply)
                expected.append(("plain", body, reply))
            if i == 100:
                await client.publish(subject, b"boom", reply=reply)
        await _wait_for(lambda: len(got) == len(expected), f"{len(got)} of {len(expected)} arrived")
        assert got == expected
        assert client.stats["in_msgs"] - before["in_msgs"] == len(expected) + 1
        assert client.stats["in_bytes"] - before["in_bytes"] == sum(len(b) for _k, b, _r in expected) + 4
        assert sub._received == len(expected) + 1
        assert sub._pending_size == 0  # nats-py's slow-consumer count is handed back message by message
        assert client.is_connected  # one handler's error did not end the connection
        await sub.unsubscribe()

    with caplog.at_level(logging.ERROR, logger="ackbridge.nats"):
        _on_raw_client(scenario)
    assert any("handling a message" in r.getMessage() for r in caplog.records)


def test_a_process_msg_with_other_arguments_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def process_msg(self: Any, sid: int, subject: bytes, reply: bytes, data: bytes) -> None:
        # A nats-py whose parser no longer passes the headers apart, using the same names.
        sub = self._subs.get(sid)
        sub._pending_size += len(data)
        sub._pending_queue.put_nowait(data)

    monkeypatch.setattr(Client, "_process_msg", process_msg)
    found = fastpath.check()
    assert not found.available
    assert "_process_msg takes" in found.reason


@pytest.mark.parametrize(("value", "fast"), [(None, True), ("0", False)])
def test_the_transport_takes_the_path_the_switch_says(harness: NatsHarness, monkeypatch: pytest.MonkeyPatch,
                                                      value: str | None, fast: bool) -> None:
    if value is None:
        monkeypatch.delenv(fastpath.ENV, raising=False)
    else:
        monkeypatch.setenv(fastpath.ENV, value)
    queue = harness.new_queue()
    with ackbridge.connect(harness.url()) as conn:
        for i in range(5):
            conn.publish(queue, b"%d" % i)
        assert conn.flush(timeout=10)
        inner: Any = transport_of(conn).inner  # type: ignore[attr-defined]
        assert inner.fast_path is fast
        with conn.consume(queue, prefetch=10) as consumer:
            sub = next(iter(inner.subs.values()))
            assert isinstance(sub.sub._pending_queue, DirectQueue) is fast
            got = [consumer.get(timeout=10) for _ in range(5)]
            assert [d.body for d in got if d is not None] == [b"%d" % i for i in range(5)]
            for delivery in got:
                assert delivery is not None
                delivery.ack()
            consumer.flush()
    assert (harness.ready(queue), harness.unacked(queue)) == (0, 0)
