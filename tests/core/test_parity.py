"""Sync and async twins expose the same public names (httpx-style parity)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import ackbridge
from ackbridge import contract
from ackbridge.transport import SYNC_METHODS, AsyncTransport, SyncTransport

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


def _contract_names(protocol: type) -> set[str]:
    names = {n for n in dir(protocol) if not n.startswith("_")}
    for klass in protocol.__mro__:
        names |= {n for n in getattr(klass, "__annotations__", {}) if not n.startswith("_")}
    return names


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_both_faces_implement_the_written_contract(sync: type, async_: type) -> None:
    """Every name of ackbridge.contract exists on both faces; a method the async
    contract awaits is a coroutine function on the async face, and plain on the sync one."""
    by_name = {c.__name__: (c, a) for c, a in contract.PAIRS}
    sync_contract, async_contract = by_name[sync.__name__]
    for name in _contract_names(sync_contract) | _contract_names(async_contract):
        instance_attr = any(name in getattr(k, "__annotations__", {}) for k in sync_contract.__mro__)
        assert instance_attr or hasattr(sync, name), f"{sync.__name__} lacks {name} of the contract"
        assert instance_attr or hasattr(async_, name), f"{async_.__name__} lacks {name} of the contract"
        declared = getattr(async_contract, name, None)
        if inspect.iscoroutinefunction(declared):
            assert inspect.iscoroutinefunction(getattr(async_, name)), f"{async_.__name__}.{name} must be async"
            assert not inspect.iscoroutinefunction(getattr(sync, name)), f"{sync.__name__}.{name} must not be"
    # and nothing public on a face is missing from the contract's names
    extra = public(sync) - _contract_names(sync_contract) - DELIVERY_FIELDS - UNLISTED
    assert not extra, f"{sync.__name__} has public names the contract does not list: {sorted(extra)}"


# Message fields a delivery carries beyond the contract's core view, and a few
# public names outside the contract. The transport callbacks (deliver, confirm,
# generation_ended, reply, failed) are private: an events adapter, not the connection.
DELIVERY_FIELDS = {"source", "routing_key", "correlation_id", "reply_to", "content_type", "timestamp",
                   "requested_acks", "broker"}
UNLISTED = {"open", "url", "broker", "add_done_callback",
            "correlation_id", "dead_lettered_by_policy", "seq"}


def test_transport_contracts_mirror_each_other() -> None:
    """Each sync primitive has its async twin, under a distinct name (so one class may serve both)."""
    for name in SYNC_METHODS:
        assert hasattr(SyncTransport, name) and not hasattr(SyncTransport, f"{name}_async")
        assert hasattr(AsyncTransport, f"{name}_async") and not hasattr(AsyncTransport, name)


def test_hooks_are_documented() -> None:
    from ackbridge import hookspecs

    for name in dir(hookspecs):
        if name.startswith("ackbridge_"):
            assert getattr(hookspecs, name).__doc__, f"hook {name} has no docstring"
            docs = (Path(__file__).resolve().parents[2] / "docs/plugins.md").read_text()
            assert name in docs, f"hook {name} missing from docs/plugins.md"


@pytest.mark.parametrize("face", [ackbridge.Connection, ackbridge.AsyncConnection])
def test_transport_callbacks_are_not_public(face: type) -> None:
    for name in ("deliver", "confirm", "generation_ended", "reply", "failed"):
        assert not hasattr(face, name), f"{face.__name__}.{name} is a transport callback"


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_each_face_subclasses_its_contract_and_takes_its_documents(sync: type, async_: type) -> None:
    """mypy holds a face to the Protocol it subclasses; the contract's docstrings,
    written once, are the faces' (inspect.getdoc and help() find them there), and a
    slotted face gains no __dict__ from the contract."""
    by_name = {c.__name__: (c, a) for c, a in contract.PAIRS}
    sync_contract, async_contract = by_name[sync.__name__]
    assert sync_contract in sync.__mro__ and async_contract in async_.__mro__
    for face, protocol in ((sync, sync_contract), (async_, async_contract)):
        for name in _contract_names(protocol):
            member = getattr(face, name, None)
            if callable(member) or isinstance(member, property):
                assert inspect.getdoc(member), f"{face.__name__}.{name} has no document"
        if "__slots__" in vars(face):
            assert "__dict__" not in dir(face), f"{face.__name__} instances would carry a __dict__"
