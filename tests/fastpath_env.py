"""The check every fast path's tests make of its switch: the environment variable forces the
public path (tests/rabbitmq/test_fastpath.py, tests/rabbitmq_streams/test_fastpath_streams.py)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from ackbridge.testing.twins import Twin

#: (ENV value, fast path used): unset and "1" keep it; "0", "false", "off" force the public path.
CASES = [(None, True), ("1", True), ("0", False), ("false", False), ("off", False)]


def check_env_switch(fastpath: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str | None, fast: bool) -> None:
    if value is None:
        monkeypatch.delenv(fastpath.ENV, raising=False)
    else:
        monkeypatch.setenv(fastpath.ENV, value)
    assert fastpath.enabled() is fast


def public_path_twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, env: str) -> Iterator[Twin]:
    """A conformance suite's twin (face ``request.param``) with the fast path's switch *env*
    set to the public path: the suite then runs on the client's public API alone."""
    monkeypatch.setenv(env, "0")
    twin = Twin(request.param)
    yield twin
    twin.close()
