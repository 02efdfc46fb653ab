"""The RabbitMQ streams offset log against the real broker: bounds, exact range
reads (starting and ending inside chunks), replay, stored offsets as the broker
holds them, errors without passwords."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import AuthenticationError, BrokerError, ConnectionLostError, InvalidOptionError
from ackbridge.transport.offset_log import OffsetLog, OffsetRange
from ackbridge_rabbitmq_streams.chunks import ChunkSubscription
from ackbridge_rabbitmq_streams.offset_log import StreamOffsetLog
from tests.rabbitmq_streams.streams import URL, StreamAdmin

pytestmark = pytest.mark.rabbitmq_streams

SECRET = "s3cret-Pw-do-not-show"


@pytest.fixture
def log() -> Iterator[OffsetLog]:
    with ackbridge.open_offset_log(URL, read_timeout=5) as opened:
        yield opened


@pytest.fixture
def chunked(admin: StreamAdmin) -> str:
    """A stream of 12 messages in three chunks: offsets 0-4, 5-7 and 8-11."""
    name = admin.new_stream()
    admin.publish_batches(name, [5, 3, 4])
    return name


def _read(log: OffsetLog, stream: str, start: int, end: int) -> list[tuple[int, bytes]]:
    return [(r.offset, r.message.body) for r in log.read(OffsetRange(stream, start, end))]


def test_open_offset_log_finds_the_plugin(log: OffsetLog) -> None:
    assert isinstance(log, StreamOffsetLog)


def test_bounds_of_an_empty_stream(log: OffsetLog, admin: StreamAdmin) -> None:
    assert log.bounds(admin.new_stream()) == (0, 0)


def test_bounds_of_a_chunked_stream(log: OffsetLog, chunked: str) -> None:
    assert log.bounds(chunked) == (0, 12)


def test_partitions_of_plain_streams(log: OffsetLog, admin: StreamAdmin, chunked: str) -> None:
    other = admin.new_stream()
    assert log.partitions(chunked) == [chunked]
    assert log.partitions(f"{chunked},{other}") == [chunked, other]


def test_read_the_whole_range(log: OffsetLog, chunked: str) -> None:
    assert _read(log, chunked, 0, 12) == [(i, f"m{i}".encode()) for i in range(12)]


@pytest.mark.parametrize(("start", "end"), [(2, 7), (6, 7), (3, 5), (5, 8), (7, 12), (11, 12), (0, 1)])
def test_read_sub_ranges_inside_chunks(log: OffsetLog, chunked: str, start: int, end: int) -> None:
    assert _read(log, chunked, start, end) == [(i, f"m{i}".encode()) for i in range(start, end)]


def test_the_same_range_gives_the_same_records(log: OffsetLog, chunked: str) -> None:
    first = [(r.offset, r.message.body, r.message.message_id, dict(r.message.headers))
             for r in log.read(OffsetRange(chunked, 3, 10))]
    with ackbridge.open_offset_log(URL) as other:
        again = [(r.offset, r.message.body, r.message.message_id, dict(r.message.headers))
                 for r in other.read(OffsetRange(chunked, 3, 10))]
    assert first == again
    assert [offset for offset, *_ in first] == list(range(3, 10))


def test_an_empty_range_reads_nothing(log: OffsetLog, chunked: str) -> None:
    assert _read(log, chunked, 12, 12) == []
    assert _read(log, chunked, 4, 4) == []


def test_a_committed_range_ends_without_waiting(chunked: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Counted, not timed: a read ends with the chunk holding its last offset and asks for
    # no chunk after it (one would never come: a wait of read_timeout, then an error).
    asked: list[int] = []
    allowed = [0]
    next_chunk = ChunkSubscription.next_chunk

    async def counted(self: ChunkSubscription, timeout: float) -> Any:
        asked.append(1)
        if len(asked) > allowed[0]:
            return None  # a chunk past the range asked for: refused at once instead of waited for
        return await next_chunk(self, timeout)

    monkeypatch.setattr(ChunkSubscription, "next_chunk", counted)
    with ackbridge.open_offset_log(URL, read_timeout=30) as log:
        allowed[0] = 3
        assert len(_read(log, chunked, 0, 12)) == 12
        assert len(asked) == 3  # chunks 0-4, 5-7 and 8-11, and not one more
        asked.clear()
        allowed[0] = 1
        assert len(_read(log, chunked, 8, 12)) == 4
        assert len(asked) == 1


def test_a_range_past_the_end_raises_after_read_timeout(chunked: str) -> None:
    with ackbridge.open_offset_log(URL, read_timeout=0.5) as log:
        reader = log.read(OffsetRange(chunked, 10, 20))
        assert [r.offset for r in (next(reader), next(reader))] == [10, 11]
        with pytest.raises(ConnectionLostError, match="read_timeout"):
            next(reader)


def test_fields_and_headers_survive(log: OffsetLog, admin: StreamAdmin) -> None:
    name = admin.new_stream()
    headers = {"text": "v", "number": 7, "ratio": 0.5, "flag": True, "none": None, "blob": b"\x00\xff"}
    admin.publish_batches(name, [2], headers=headers, message_id="id-1", correlation_id="c-1",
                          content_type="text/plain", reply_to="back", timestamp=1700000000.25)
    records = list(log.read(OffsetRange(name, 0, 2)))
    assert len(records) == 2
    message = records[1].message
    assert dict(message.headers) == headers
    assert (message.message_id, message.correlation_id, message.content_type, message.reply_to) == (
        "id-1", "c-1", "text/plain", "back")
    assert message.timestamp == 1700000000.25
    assert message.source == name


def test_store_offset_is_what_the_broker_holds(log: OffsetLog, admin: StreamAdmin, chunked: str) -> None:
    assert log.stored_offset(chunked, "spark-q1") is None
    log.store_offset(chunked, "spark-q1", 7)
    # The broker holds the last offset processed, as RabbitMQ's own clients store it.
    assert admin.broker_offset(chunked, "spark-q1") == 6
    assert log.stored_offset(chunked, "spark-q1") == 7
    log.store_offset(chunked, "spark-q1", 12)
    assert admin.broker_offset(chunked, "spark-q1") == 11
    assert log.stored_offset(chunked, "spark-q1") == 12


def test_an_offset_stored_by_another_client_is_read(log: OffsetLog, admin: StreamAdmin, chunked: str) -> None:
    admin.store_raw(chunked, "java-app", 4)
    assert log.stored_offset(chunked, "java-app") == 5


def test_storing_takes_an_offset_that_no_read_returns(log: OffsetLog, admin: StreamAdmin, chunked: str) -> None:
    log.store_offset(chunked, "ref", 12)           # the tracking record lands at offset 12
    admin.publish_batches(chunked, [2])
    first, end = log.bounds(chunked)
    assert (first, end) == (0, 15)
    tail = _read(log, chunked, 12, 15)
    assert [offset for offset, _ in tail] == [13, 14]
    assert [body for _, body in tail] == [b"m0", b"m1"]   # the helper numbers each call's bodies afresh


def test_unknown_stream(log: OffsetLog, admin: StreamAdmin) -> None:
    missing = admin.name_only("ab-missing")
    with pytest.raises(BrokerError, match="does not exist"):
        log.partitions(missing)
    with pytest.raises(BrokerError, match="does not exist"):
        log.bounds(missing)
    with pytest.raises(BrokerError, match="does not exist"):
        list(log.read(OffsetRange(missing, 0, 5)))
    with pytest.raises(BrokerError, match="does not exist"):
        log.store_offset(missing, "ref", 3)
    # The log keeps working after the refusals.
    assert log.bounds(admin.new_stream()) == (0, 0)


def test_no_password_in_repr_or_errors(admin: StreamAdmin) -> None:
    url = URL.replace("guest:guest", f"guest:{SECRET}")
    with pytest.raises(AuthenticationError) as refused:
        ackbridge.open_offset_log(url)
    assert SECRET not in str(refused.value) and SECRET not in repr(refused.value)
    with ackbridge.open_offset_log(URL) as log:
        assert "guest:***@" in repr(log)
        missing = admin.name_only("ab-missing")
        with pytest.raises(BrokerError) as error:
            log.bounds(missing)
        assert "guest:***@127.0.0.1:5552" in str(error.value)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="read_timout"):
        ackbridge.open_offset_log(URL, read_timout=3)


def test_close_twice_is_harmless() -> None:
    log = ackbridge.open_offset_log(URL)
    log.close()
    log.close()
    with pytest.raises(ConnectionLostError):
        log.bounds("anything")
