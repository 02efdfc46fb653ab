"""The embedded broker under pauses, heartbeat failure, a full disk and a damaged or deleted file (issue 20).

LOST = 0 wherever the data still exists; where the file itself is destroyed, a
typed error naming the file from every call, and no thread dies silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from ackbridge_local.errors import DamagedFileError
from tests.local import damage, scenarios
from tests.local.harness import LocalHarness
from tests.scoreboard.checker import score


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[LocalHarness]:
    made = LocalHarness(tmp_path)
    yield made
    made.cleanup()


def lost(result: scenarios.Result) -> set[str]:
    h = result.history
    return h.confirmed - set(h.delivered)


@pytest.mark.timeout(300)
def test_paused_consumer_past_its_lease_loses_nothing(harness: LocalHarness) -> None:
    result = scenarios.paused_consumer(harness)
    h = result.history
    assert len(h.confirmed) == 130
    assert lost(result) == set(), score("embedded", "consumer", "paused", h)
    assert harness.ready_and_leased_everywhere() == (0, 0)


def test_heartbeat_failure_ends_the_generation_and_the_consumer_carries_on(harness: LocalHarness) -> None:
    result = scenarios.heartbeat_failure(harness)
    assert lost(result) == set()
    assert result.thread_deaths == []
    # The deliveries held while the heartbeat failed went stale: refused, redelivered.
    assert result.history.stale_refused >= 1
    assert all("StaleDeliveryError" in e for e in result.errors)
    assert harness.ready_and_leased_everywhere() == (0, 0)


def test_disk_full_then_freed_the_same_consumer_drains_everything() -> None:
    result = scenarios.disk_full()
    h = result.history
    assert lost(result) == set()
    refusals = [e for e in result.errors if e.startswith("publish refused")]
    assert refusals and all("database or disk is full" in e and "broker.db" in e for e in refusals)
    assert not any("no transaction is active" in e for e in result.errors)
    acks = [e for e in result.errors if e.startswith("ack")]
    assert acks and all("StorageFullError" in e or "StaleDeliveryError" in e for e in acks)
    assert any("StorageFullError" in e and "database or disk is full" in e for e in acks)
    assert len(h.refused) == 20 and not h.refused & set(h.delivered)


def test_corrupt_file_gives_typed_errors_from_every_call(harness: LocalHarness) -> None:
    result = scenarios.corrupt_file(harness)
    where = {e.split(": ")[0]: e for e in result.errors}
    for call in ("consume", "ack", "close", "connect"):
        assert f": {scenarios.DamagedFileError.__name__}: " in where[call], where[call]
        assert str(harness.path) in where[call]
    assert "late" not in result.history.confirmed
    assert result.thread_deaths == []


def test_deleted_file_is_detected_and_reported(harness: LocalHarness) -> None:
    result = scenarios.deleted_file(harness)
    where = {e.split(": ")[0]: e for e in result.errors}
    assert "was deleted while open" in where["background check"]
    assert "late" not in result.history.confirmed and "deleted" in where["publish refused"]
    for call in ("ack", "consume", "close", "connect"):
        assert f": {scenarios.DamagedFileError.__name__}: " in where[call], where[call]
    assert "is missing although broker" in where["connect"]
    assert result.thread_deaths == []


def _write_and_close(path: Path, n: int = 100) -> None:
    with ackbridge.connect(f"local://{path}", fsync=False) as conn:
        for i in range(n):
            conn.publish("q", b"x", message_id=f"m{i}")
        assert conn.flush(timeout=30)


def test_broker_file_truncated_to_zero_while_closed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    _write_and_close(path)
    os.truncate(path, 0)
    with pytest.raises(DamagedFileError, match=r"is empty \(0 bytes\) although broker \w+ held data"):
        ackbridge.connect(f"local://{path}")
    assert path.stat().st_size == 0  # nothing was written over it


def test_broker_file_deleted_while_closed_is_refused_not_recreated_empty(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    _write_and_close(path)
    path.unlink()
    with pytest.raises(DamagedFileError, match="is missing although broker"):
        ackbridge.connect(f"local://{path}")
    assert not path.exists()


def test_broker_file_replaced_is_detected_while_open_and_on_open(tmp_path: Path) -> None:
    path, other = tmp_path / "b.db", tmp_path / "other.db"
    _write_and_close(other)
    with ackbridge.connect(f"local://{path}", lease_timeout=1) as conn:
        transport: Any = transport_of(conn)
        os.replace(other, path)
        eventually(lambda: transport.failure is not None, message="replacement noticed")
        assert "was replaced by another file while open" in str(transport.failure)
        confirm = conn.publish("q", b"after")
        assert conn.flush(timeout=30)
        assert confirm.outcome is not None and not confirm.outcome.confirmed
        with pytest.raises(DamagedFileError):
            conn.close()
    with pytest.raises(DamagedFileError, match="the file was replaced"):
        ackbridge.connect(f"local://{path}")


def test_broker_file_truncated_while_open_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    conn = ackbridge.connect(f"local://{path}", lease_timeout=1)
    transport: Any = transport_of(conn)
    os.truncate(path, 0)
    eventually(lambda: transport.failure is not None, message="truncation noticed")
    assert "truncated to 0 bytes while open" in str(transport.failure)
    with pytest.raises(DamagedFileError, match=str(path)):
        conn.close()


def test_damage_met_by_the_polling_thread_is_recorded_logged_and_raised(
        harness: LocalHarness, caplog: pytest.LogCaptureFixture) -> None:
    queue, url = harness.new_queue(), harness.url()
    deaths: list[str] = []
    with ackbridge.connect(url, fsync=False) as publisher:
        for i in range(300):
            publisher.publish(queue, b"x" * 200, message_id=f"m{i}")
        assert publisher.flush(timeout=30)
    conn = ackbridge.connect(url, fsync=False)
    consumer = conn.consume(queue, prefetch=1000)  # room left: the thread keeps leasing
    held = consumer.get(timeout=30)
    assert held is not None
    transport: Any = transport_of(conn)
    with scenarios.ThreadDeaths(deaths):
        damage.corrupt_message_pages(harness.path)
        eventually(lambda: transport.failure is not None, message="the polling thread met the damage")
    assert deaths == []
    # The failure is recorded before it is logged (the log call is outside the transport's lock).
    eventually(lambda: any(r.levelname == "ERROR" and str(harness.path) in r.getMessage() for r in caplog.records),
               message="the damage logged")
    with pytest.raises(DamagedFileError, match=str(harness.path)):
        held.ack()

    def drain() -> None:  # what was handed over before the damage, then the error: never a silent None
        while consumer.get(timeout=10) is not None:
            pass

    with pytest.raises(DamagedFileError, match=str(harness.path)):
        drain()
    with pytest.raises(DamagedFileError):
        conn.consume(queue)
    with pytest.raises(DamagedFileError):
        conn.close()


def test_async_consumer_waiting_for_deliveries_raises_the_damage(harness: LocalHarness) -> None:
    """The asyncio face hears of the failure too: a waiting get() raises it."""
    import asyncio

    queue, url = harness.new_queue(), harness.url()
    with ackbridge.connect(url, fsync=False) as publisher:
        for i in range(50):
            publisher.publish(queue, b"y" * 200, message_id=f"a{i}")
        assert publisher.flush(timeout=30)

    async def scenario() -> None:
        conn = await ackbridge.connect_async(url, fsync=False)
        consumer = await conn.consume(queue, prefetch=1000)
        assert await consumer.get(timeout=30) is not None
        transport: Any = transport_of(conn)
        damage.corrupt_message_pages(harness.path)
        await asyncio.to_thread(eventually, lambda: transport.failure is not None, 15.0)
        with pytest.raises(DamagedFileError, match=str(harness.path)):
            while await consumer.get(timeout=10) is not None:
                pass
        with pytest.raises(DamagedFileError):
            await conn.close()

    asyncio.run(scenario())
