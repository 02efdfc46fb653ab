"""Sync and async twins expose the same public names (httpx-style parity)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ackbridge
from ackbridge.transport import SYNC_METHODS, Transport

PAIRS = [
    (ackbridge.Connection, ackbridge.AsyncConnection),
    (ackbridge.Consumer, ackbridge.AsyncConsumer),
    (ackbridge.Delivery, ackbridge.AsyncDelivery),
    (ackbridge.Publisher, ackbridge.AsyncPublisher),
    (ackbridge.Confirm, ackbridge.AsyncConfirm),
]


def public(cls: type) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_")}
    return names - {"__iter__", "__aiter__"}


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_twins_have_the_same_public_names(sync: type, async_: type) -> None:
    assert public(sync) == public(async_)


def test_transport_async_side_mirrors_sync_side() -> None:
    for name in SYNC_METHODS:
        assert hasattr(Transport, name) and hasattr(Transport, f"{name}_async")


def test_hooks_are_documented() -> None:
    from ackbridge import hookspecs

    for name in dir(hookspecs):
        if name.startswith("ackbridge_"):
            assert getattr(hookspecs, name).__doc__, f"hook {name} has no docstring"
            docs = (Path(__file__).resolve().parents[2] / "docs/plugins.md").read_text()
            assert name in docs, f"hook {name} missing from docs/plugins.md"
