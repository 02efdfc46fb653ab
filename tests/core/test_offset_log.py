"""The offset-log contract's core side: ranges, and brokers without logs."""

from __future__ import annotations

from pathlib import Path

import pytest

import ackbridge
from ackbridge.errors import ConfigurationError, UnsupportedVerbError


def test_a_queue_broker_has_no_offset_log(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedVerbError) as info:
        ackbridge.open_offset_log(f"local://{tmp_path}/q.db")
    assert "offset log" in str(info.value) and "local://" in str(info.value)


def test_offset_range_checks_its_bounds() -> None:
    assert ackbridge.OffsetRange("s", 5, 9).count == 4
    assert ackbridge.OffsetRange("s", 5, 5).count == 0
    for start, end in ((-1, 3), (4, 3)):
        with pytest.raises(ConfigurationError, match="bad offset range"):
            ackbridge.OffsetRange("s", start, end)
