"""Publishes queued for a stream leave in one Publish frame (a frame per message cost a
socket write each), split at the frame size, in call order, each confirmed or refused on
its own. The frames are counted on rstream's real ``Client.send_publish_frame`` (the fast
path) or ``Client.publish`` (the public path), called through; what was stored is read back
from the broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rstream import schema
from rstream.client import Client

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import faults
from ackbridge.testing.harness import eventually
from ackbridge.transport.offset_log import OffsetRange
from ackbridge_rabbitmq_streams import fastpath
from ackbridge_rabbitmq_streams.connection import FRAME_MAX
from tests.rabbitmq_streams.streams import URL, StreamAdmin

pytestmark = pytest.mark.rabbitmq_streams


@pytest.fixture(params=[True, False], ids=["fast-path", "public-path"])
def frames(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[int]]]:
    """The record sizes of each Publish frame sent, frame by frame: on the fast path through
    ``Client.send_publish_frame`` (as rstream's Producer), on the public path ``Client.publish``."""
    fast = request.param
    monkeypatch.setenv(fastpath.ENV, "1" if fast else "0")
    sent: list[list[int]] = []
    send_frame, publish = Client.send_publish_frame, Client.publish

    async def counted_frame(self: Client, frame: schema.Publish, version: int = 1) -> None:
        assert fast, "the public path sent through send_publish_frame"
        sent.append([len(m.data) for m in frame.messages])
        await send_frame(self, frame, version)

    async def counted_publish(self: Client, messages: list[schema.Message], publisher_id: int) -> None:
        assert not fast, "the fast path sent through Client.publish"
        sent.append([len(m.data) for m in messages])
        await publish(self, messages, publisher_id)

    monkeypatch.setattr(Client, "send_publish_frame", counted_frame)
    monkeypatch.setattr(Client, "publish", counted_publish)
    yield sent


def _bodies(stream: str) -> list[bytes]:
    """Every body *stream* holds, in offset order."""
    with ackbridge.open_offset_log(URL) as log:
        start, end = log.bounds(stream)
        return [record.message.body for record in log.read(OffsetRange(stream, start, end))]


def _held(conn: Any, send: Callable[[], list[Any]]) -> list[Any]:
    """*send*'s publishes, held until every one waits on the transport's loop, then released
    together (released early, the rest would overtake the held ones: the seam's race)."""
    seam = faults(conn)
    seam.hold_publishes(True)
    confirms = send()
    eventually(lambda: len(seam.transport.inner.held.publishes or ()) == len(confirms),  # type: ignore[attr-defined]
               message="every publish held")
    seam.hold_publishes(False)
    return confirms


def test_publishes_queued_together_leave_in_one_frame_in_call_order(admin: StreamAdmin,
                                                                    frames: list[list[int]]) -> None:
    name = admin.new_stream()
    with ackbridge.connect(URL) as conn:
        publisher = conn.publisher(window=1000)
        # The first publish declares the stream's publisher (a round trip): not counted.
        assert publisher.publish(name, b"warm-up").result(timeout=10).status is ConfirmStatus.CONFIRMED
        frames.clear()
        confirms = _held(conn, lambda: [publisher.publish(name, f"b{i}".encode()) for i in range(500)])
        assert publisher.flush(timeout=30)
    assert {c.outcome.status for c in confirms} == {ConfirmStatus.CONFIRMED}
    assert sum(len(frame) for frame in frames) == 500
    assert len(frames) == 1, f"{len(frames)} Publish frames for 500 queued publishes"
    assert _bodies(name) == [b"warm-up"] + [f"b{i}".encode() for i in range(500)]


def test_a_run_past_the_frame_size_is_split_and_a_record_too_big_is_refused_alone(
        admin: StreamAdmin, frames: list[list[int]]) -> None:
    name = admin.new_stream()
    part = 400 * 1024  # two fit a frame, three do not
    bodies = [bytes([i]) * part for i in range(5)] + [b"x" * (FRAME_MAX + 1)] + [bytes([i]) * part
                                                                                 for i in range(5, 7)]
    with ackbridge.connect(URL) as conn:
        publisher = conn.publisher(window=100)
        assert publisher.publish(name, b"warm-up").result(timeout=10).status is ConfirmStatus.CONFIRMED
        frames.clear()
        confirms = _held(conn, lambda: [publisher.publish(name, body) for body in bodies])
        outcomes = [c.result(timeout=30) for c in confirms]
    assert [o.status for o in outcomes] == [ConfirmStatus.CONFIRMED] * 5 + [ConfirmStatus.REFUSED] + [
        ConfirmStatus.CONFIRMED] * 2
    assert "frame size" in outcomes[5].reason
    assert [len(frame) for frame in frames] == [2, 2, 2, 1]  # the refused record between the 5th and 6th
    assert all(sum(size + 12 for size in frame) + 64 <= FRAME_MAX for frame in frames)
    stored = _bodies(name)
    assert [len(b) for b in stored] == [7] + [part] * 7
    assert stored[1:] == bodies[:5] + bodies[6:]


def test_publishes_to_two_streams_interleaved_go_each_to_its_own(admin: StreamAdmin,
                                                               frames: list[list[int]]) -> None:
    """A run stops where the next publish goes to another stream: its own publisher, its
    own frame."""
    first, second = admin.new_stream(), admin.new_stream()
    with ackbridge.connect(URL) as conn:
        publisher = conn.publisher(window=1000)
        for name in (first, second):  # declare both publishers first
            assert publisher.publish(name, b"warm-up").result(timeout=10).status is ConfirmStatus.CONFIRMED
        frames.clear()
        plan = [(first, b"a0"), (first, b"a1"), (second, b"b0"), (first, b"a2"), (second, b"b1"), (second, b"b2")]
        confirms = _held(conn, lambda: [publisher.publish(name, body) for name, body in plan])
        assert publisher.flush(timeout=30)
    assert {c.outcome.status for c in confirms} == {ConfirmStatus.CONFIRMED}
    assert [len(frame) for frame in frames] == [2, 1, 1, 2]
    assert _bodies(first) == [b"warm-up", b"a0", b"a1", b"a2"]
    assert _bodies(second) == [b"warm-up", b"b0", b"b1", b"b2"]
