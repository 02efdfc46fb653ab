"""Bad and odd input on the embedded broker: a clear error or a faithful round trip, never a loss."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ackbridge
from ackbridge.errors import InvalidOptionError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import transport_of


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ackbridge.Connection]:
    path = tmp_path_factory.mktemp("bad") / "b.db"
    with ackbridge.connect(f"local://{path}", fsync=False) as connection:
        yield connection


def roundtrip(conn: ackbridge.Connection, body: bytes, headers: dict[str, object] | None = None) -> ackbridge.Delivery:
    queue = f"rt-{abs(hash((body, str(headers))))}"
    assert conn.publish(queue, body, headers=headers).result(timeout=30).status is ConfirmStatus.CONFIRMED
    with conn.consume(queue, prefetch=1) as consumer:
        delivery = consumer.get(timeout=30)
        assert delivery is not None
        delivery.ack()
    return delivery


def test_every_byte_value_and_invalid_utf8_survive(conn: ackbridge.Connection) -> None:
    body = bytes(range(256)) + b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\x00"
    assert roundtrip(conn, body).body == body


def test_empty_body(conn: ackbridge.Connection) -> None:
    assert roundtrip(conn, b"").body == b""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=2048))
def test_any_body_round_trips(conn: ackbridge.Connection, body: bytes) -> None:
    assert roundtrip(conn, body).body == body


header_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False),
    st.text(max_size=50), st.binary(max_size=50),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.dictionaries(st.text(min_size=1, max_size=30), header_values, max_size=5))
def test_valid_headers_round_trip(conn: ackbridge.Connection, headers: dict[str, object]) -> None:
    assert dict(roundtrip(conn, b"h", headers).headers) == headers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.sets(st.integers(), max_size=2), st.lists(st.integers(), max_size=2),
                       st.integers(min_value=2**63), st.integers(max_value=-(2**63) - 1),
                       st.dictionaries(st.text(), st.text(), max_size=1)))
def test_unsupported_header_values_are_refused_before_sending(conn: ackbridge.Connection, value: object) -> None:
    with pytest.raises(InvalidOptionError, match="header 'k'"):
        conn.publish("never", b"x", headers={"k": value})


def test_oversized_body_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    with ackbridge.connect(f"local://{tmp_path}/s.db", max_message_bytes=1024) as small:
        just_fits = small.publish("q", b"x" * 1024).result(timeout=30)
        too_big = small.publish("q", b"x" * 1025).result(timeout=30)
        assert just_fits.status is ConfirmStatus.CONFIRMED
        assert too_big.status is ConfirmStatus.REFUSED and "max_message_bytes=1024" in too_big.reason
        assert transport_of(small).store.counts("q") == (1, 0)  # type: ignore[attr-defined]


@settings(max_examples=80, deadline=None)
@given(url=st.text(max_size=80))
def test_arbitrary_url_text_gives_a_typed_error_or_connects(url: str) -> None:
    try:
        ackbridge.connect(url).close()
    except ackbridge.ConfigurationError:
        pass
    except ackbridge.AckbridgeError as exc:  # e.g. a local:// path that cannot be opened
        assert not isinstance(exc, ackbridge.SettlementError)


def test_unusable_broker_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ackbridge.BrokerError, match="cannot open the embedded broker file"):
        ackbridge.connect(f"local://{tmp_path}")  # a directory, not a file
