"""The check every fast path's tests make of its switch: the environment variable forces the
public path (tests/rabbitmq/test_fastpath.py, tests/rabbitmq_streams/test_fastpath_streams.py)."""

from __future__ import annotations

from types import ModuleType

import pytest

#: (ENV value, fast path used): unset and "1" keep it; "0", "false", "off" force the public path.
CASES = [(None, True), ("1", True), ("0", False), ("false", False), ("off", False)]


def check_env_switch(fastpath: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str | None, fast: bool) -> None:
    if value is None:
        monkeypatch.delenv(fastpath.ENV, raising=False)
    else:
        monkeypatch.setenv(fastpath.ENV, value)
    assert fastpath.enabled() is fast
