"""Every configuration and settlement error: its type, its words, and no password in it."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

import ackbridge
from ackbridge import errors
from ackbridge.plugins import registry
from ackbridge.testing.faults import faults

CANARY = "Canary-Pw-7f3a9"
ROOT = Path(__file__).resolve().parents[2]


def _no_canary(exc: BaseException) -> None:
    assert CANARY not in str(exc) and CANARY not in repr(exc)
    if exc.__cause__ is not None:
        _no_canary(exc.__cause__)


@pytest.fixture
def local_url(tmp_path: Path) -> str:
    return f"local://{tmp_path}/b.db"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        (f"amqp//guest:{CANARY}@host", "has no scheme"),
        (f"amqp://guest:{CANARY}@host:99999/", "invalid port"),
        (f"amqp://guest:{CANARY}@host:abc/", "invalid port"),
        (f"1amqp://guest:{CANARY}@host/", "invalid scheme"),
        (f"amqp://guest:{CANARY}@ho st/", "whitespace"),
        (f"amqp://guest:{CANARY}@[::1/", "invalid address"),
    ],
)
def test_bad_url(url: str, match: str) -> None:
    with pytest.raises(errors.InvalidURLError, match=match) as err:
        ackbridge.connect(url)
    _no_canary(err.value)
    assert "***" in str(err.value) or "@" not in str(err.value)


def test_non_string_url() -> None:
    with pytest.raises(errors.InvalidURLError, match="must be a string"):
        ackbridge.connect(42)  # type: ignore[arg-type]


def test_unknown_scheme_suggests() -> None:
    with pytest.raises(errors.UnknownSchemeError, match="did you mean 'local'") as err:
        ackbridge.connect(f"locall://user:{CANARY}@x/")
    _no_canary(err.value)
    assert "registered:" in str(err.value)


def test_unknown_option_suggests(local_url: str) -> None:
    with pytest.raises(errors.InvalidOptionError, match="no option 'prefech'; did you mean 'prefetch'"):
        ackbridge.connect(local_url, prefech=10)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"prefetch": "ten"}, "not a valid int"),
        ({"prefetch": 0}, "must be >= 1"),
        ({"prefetch": True}, "must be int, not bool"),
        ({"conflate_ms": -1}, "must be >= 0"),
        ({"window": 2.5}, "must be int, not float"),
        ({"fsync": "maybe"}, "not a valid bool"),
    ],
)
def test_bad_option_values(local_url: str, options: dict[str, object], match: str) -> None:
    with pytest.raises(errors.InvalidOptionError, match=match):
        ackbridge.connect(local_url, **options)


def test_options_from_url_query_are_checked(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidOptionError, match="prefetch"):
        ackbridge.connect(f"local://{tmp_path}/b.db?prefetch=-3")
    with ackbridge.connect(f"local://{tmp_path}/b.db?prefetch=7&fsync=false") as conn:
        assert conn._options["prefetch"] == 7


def test_consume_options_checked(local_url: str) -> None:
    with ackbridge.connect(local_url) as conn, pytest.raises(errors.InvalidOptionError, match="conflate_count"):
        conn.consume("q", conflate_count=0)


def test_handler_must_be_callable(local_url: str) -> None:
    with ackbridge.connect(local_url) as conn:
        conn.declare_queue("q")
        with pytest.raises(errors.InvalidOptionError, match="handler must be callable, not str"):
            conn.consume("q", handler="print")  # type: ignore[arg-type]


def test_async_handler_must_be_callable(local_url: str) -> None:
    async def scenario() -> None:
        async with await ackbridge.connect_async(local_url) as conn:
            await conn.declare_queue("q")
            with pytest.raises(errors.InvalidOptionError, match="handler must be callable, not int"):
                await conn.consume("q", handler=3)  # type: ignore[arg-type]

    asyncio.run(scenario())


@pytest.mark.parametrize("label", ["ab", "has space", "x" * 101, "ünïcode", 7])
def test_invalid_label(local_url: str, label: object) -> None:
    with ackbridge.connect(local_url) as conn, pytest.raises(errors.InvalidLabelError):
        conn.publish("q", b"x", requested_acks=(label,))  # type: ignore[arg-type]


def test_empty_label_request(local_url: str) -> None:
    with ackbridge.connect(local_url) as conn, pytest.raises(errors.InvalidLabelError, match="at least one"):
        conn.publish("q", b"x", requested_acks=())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"body": "text"}, "body must be bytes"),
        ({"body": b"x", "headers": {"k": {1, 2}}}, "type set"),
        ({"body": b"x", "headers": {"k": 2**64}}, "outside 64 bits"),
        ({"body": b"x", "headers": {"k" * 256: 1}}, "longer than 255"),
        ({"body": b"x", "headers": {1: 1}}, "header names"),
        ({"body": b"x", "headers": {"k": "\udcff"}}, "not valid Unicode"),
    ],
)
def test_bad_publish_input(local_url: str, kwargs: dict[str, object], match: str) -> None:
    with ackbridge.connect(local_url) as conn, pytest.raises(errors.InvalidOptionError, match=match):
        conn.publish("q", **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def memory_plugin() -> Iterator[None]:
    spec = importlib.util.spec_from_file_location(
        "ackbridge_memory", ROOT / "examples/ackbridge-memory-plugin/ackbridge_memory/__init__.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reg = registry()
    reg.add_entry_point("memory-test", "ackbridge_memory", module)
    yield
    for scheme in ("memory",):
        reg.adapters.pop(scheme, None)
    reg.manager.unregister(name="memory-test")
    reg.statuses[:] = [s for s in reg.statuses if s.name != "memory-test"]


def test_unsupported_verb_names_broker_and_verb(memory_plugin: None) -> None:
    with ackbridge.connect(f"memory://user:{CANARY}@x") as conn:
        assert CANARY not in repr(conn)
        conn.publish("uq", b"x").result()
        delivery = conn.consume("uq").get(timeout=5)
        assert delivery is not None
        with pytest.raises(errors.UnsupportedVerbError, match="memory does not support 'reject'") as err:
            delivery.reject()
        assert err.value.broker == "memory" and err.value.verb == "reject"
        _no_canary(err.value)
        assert not delivery.settled
        with pytest.raises(errors.UnsupportedVerbError, match="labelled acks"):
            conn.publish("uq", b"y", requested_acks=("broker-persisted",))
        with pytest.raises(errors.UnsupportedVerbError, match="delivery count"):
            conn.consume("uq", max_deliveries=3)
        delivery.ack()


def test_double_and_stale_settle_messages(local_url: str) -> None:
    with ackbridge.connect(local_url.replace("local://", "local://")) as conn:
        conn.publish("q", b"a").result()
        conn.publish("q", b"b").result()
        consumer = conn.consume("q", prefetch=1)
        first = consumer.get(timeout=5)
        assert first is not None
        first.ack()
        with pytest.raises(errors.AlreadySettledError, match="already acked; nothing was sent"):
            first.requeue()
        second = consumer.get(timeout=5)
        assert second is not None
        faults(conn).sever("test")
        with pytest.raises(errors.StaleDeliveryError, match="has ended; nothing was sent") as err:
            second.ack()
        assert err.value.recoverable
        assert isinstance(err.value, errors.SettlementError)


def test_error_tree_in_docstring() -> None:
    doc = errors.__doc__ or ""
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, errors.AckbridgeError):
            assert name in doc, f"{name} missing from the tree in ackbridge.errors"
