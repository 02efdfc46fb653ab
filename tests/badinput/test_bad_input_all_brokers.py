"""Bad and odd input against EVERY plugin, on the real brokers.

The property, per broker: any input gives a clear ackbridge error (before
anything is sent, or as a refused confirm) or a faithful round trip (publish
with confirm, consume, compare byte for byte, ack); never a lost message, a
crashed client thread (the ``no_thread_crashes`` fixture) or a hang (every
wait is bounded), and the connection stays usable afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ackbridge
from ackbridge.errors import AckbridgeError, ConfigurationError, InvalidLabelError, InvalidOptionError
from ackbridge.messages import ConfirmStatus
from ackbridge.plugins import registry

FIXTURES = [HealthCheck.function_scoped_fixture]
#: Invalid UTF-8 (lone continuation, truncated and overlong sequences, surrogates, > U+10FFFF).
INVALID_UTF8 = b"\x80\xbf\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c\x28\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xff\xfe"
#: What MQTT lets a server refuse in strings (Mosquitto drops the connection on them).
MQTT_BAD_TEXT = ["a\x00b", "tab\there", "del\x7f", "c1\x85", "\ufffe", "\ufdd0", "\U0001ffff"]


@pytest.fixture(scope="module")
def conn(harness: Any) -> Iterator[ackbridge.Connection]:
    with ackbridge.connect(harness.url(), confirm_timeout=15, **harness.connect_options()) as connection:
        yield connection


@pytest.fixture(scope="module")
def queue(harness: Any, conn: ackbridge.Connection) -> str:
    return str(harness.new_queue(dead_letter=True))


def roundtrip(harness: Any, conn: ackbridge.Connection, queue: str, body: bytes,
              headers: dict[str, Any] | None = None) -> ackbridge.Delivery:
    """Publish with confirm, consume, check the body byte for byte, ack."""
    mid = uuid.uuid4().hex
    outcome = conn.publish(harness.publish_target(queue), body, headers=headers,
                           message_id=mid if harness.kind != "mqtt-3.1.1" else None).result(timeout=30)
    assert outcome.status is ConfirmStatus.CONFIRMED, outcome
    with conn.consume(queue, prefetch=1) as consumer:
        delivery = consumer.get(timeout=20)
        assert delivery is not None, f"confirmed message never delivered (LOST) on {harness.name}"
        if harness.kind != "mqtt-3.1.1":
            assert delivery.message_id == mid
        assert delivery.body == body, f"{len(delivery.body)} bytes back for {len(body)} sent"
        delivery.ack()
    return delivery


# ---- bodies --------------------------------------------------------------------------------
def test_every_byte_value_and_invalid_utf8_round_trip(harness: Any, conn: ackbridge.Connection, queue: str) -> None:
    body = bytes(range(256)) + INVALID_UTF8 + bytes(range(255, -1, -1))
    assert roundtrip(harness, conn, queue, body).body == body


def test_empty_body_round_trips(harness: Any, conn: ackbridge.Connection, queue: str) -> None:
    assert roundtrip(harness, conn, queue, b"").body == b""


@settings(max_examples=6, deadline=None, suppress_health_check=FIXTURES)
@given(body=st.binary(max_size=4096))
def test_any_body_round_trips(harness: Any, conn: ackbridge.Connection, queue: str, body: bytes) -> None:
    assert roundtrip(harness, conn, queue, body).body == body


def test_body_larger_than_a_frame_round_trips(harness: Any, conn: ackbridge.Connection, queue: str) -> None:
    # 2 MiB: past RabbitMQ's frame_max (128 KiB, several body frames) and AMQP 1.0's
    # max-frame-size (several transfer frames); Mosquitto 2.0 has no size limit by default.
    # NATS carries a message in one frame up to the server's max_payload (1 MiB by default):
    # 1 MiB minus room for headers there; over it is refused (test_oversized_body...).
    # RabbitMQ streams: one record travels in one stream frame (frame_max 1 MiB), likewise.
    body = bytes(range(256)) * (4000 if harness.kind in ("nats", "rabbitmq-streams") else 8192)
    assert roundtrip(harness, conn, queue, body).body == body


def test_oversized_body_is_refused_or_declared(harness: Any, conn: ackbridge.Connection) -> None:
    """Over the limit is a REFUSED confirm and nothing stored; at the limit round-trips."""
    if harness.kind == "embedded":
        queue = harness.new_queue()
        outcome = conn.publish(queue, harness.oversized_body()).result(timeout=30)
        assert outcome.status is ConfirmStatus.REFUSED and "max_message_bytes" in outcome.reason
        assert harness.ready(queue) == 0
        return
    if harness.kind == "rabbitmq":
        # RabbitMQ's max_message_size is 128 MiB (3.10 default); a queue capped with
        # x-max-length-bytes + reject-publish shows the same refusal path cheaply.
        from tests.rabbitmq.harness import delete_queue, mgmt

        name = f"abtest-cap-{uuid.uuid4().hex[:10]}"
        mgmt("PUT", f"/queues/%2F/{name}", {"durable": True, "auto_delete": False, "arguments": {
            "x-max-length-bytes": 1024, "x-overflow": "reject-publish"}})
        try:
            fits = conn.publish(name, b"f" * 1024).result(timeout=30)
            over = conn.publish(name, b"o" * 1025).result(timeout=30)
            assert fits.status is ConfirmStatus.CONFIRMED
            assert over.status is ConfirmStatus.REFUSED, over
            with conn.consume(name, prefetch=5) as consumer:
                got = consumer.get(timeout=20)
                assert got is not None and got.body == b"f" * 1024
                got.ack()
                assert consumer.get(timeout=0.5) is None
        finally:
            delete_queue(name)
        return
    if harness.kind == "nats":
        # nats-server's max_payload (1 MiB by default) bounds a message: over it is refused
        # before sending, with the server's figure in the reason, and nothing is stored.
        queue = harness.new_queue()
        over = conn.publish(harness.publish_target(queue), b"o" * (2 * 1024 * 1024)).result(timeout=30)
        assert over.status is ConfirmStatus.REFUSED and "max_payload" in over.reason, over
        assert harness.ready(queue) == 0
        return
    if harness.kind == "rabbitmq-streams":
        # A record rides in one stream frame (the broker's frame_max, 1 MiB by default): over it
        # is refused before sending, with the frame size in the reason, and nothing is stored.
        queue = harness.new_queue()
        over = conn.publish(harness.publish_target(queue), b"o" * (2 * 1024 * 1024)).result(timeout=30)
        assert over.status is ConfirmStatus.REFUSED and "frame size" in over.reason, over
        assert harness.ready(queue) == 0
        return
    # Mosquitto 2.0 (message_size_limit unset) and RabbitMQ's AMQP 1.0 plugin (128 MiB)
    # take 8 MiB; documented in docs/broker-quirks.md. MQTT's own limit is 256 MiB per
    # packet: paho refuses more before sending (a refused confirm).
    queue = harness.new_queue()
    body = b"\x00\xff" * (4 * 1024 * 1024)
    assert roundtrip(harness, conn, queue, body).body == body


# ---- headers ---------------------------------------------------------------------------------
def header_values(kind: str) -> st.SearchStrategy[Any]:
    text = st.text(max_size=40)
    if kind.startswith("mqtt"):
        text = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff"),
                       max_size=40).filter(lambda t: not any(0xFDD0 <= ord(c) <= 0xFDEF for c in t))
    values = [st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), text, st.binary(max_size=40)]
    if kind != "rabbitmq":  # pika cannot send floats: refused, see below
        values.append(st.floats(allow_nan=False))
    return st.one_of(*values)


@settings(max_examples=6, deadline=None, suppress_health_check=FIXTURES)
@given(data=st.data())
def test_valid_headers_round_trip_with_their_types(harness: Any, conn: ackbridge.Connection, queue: str,
                                                   data: st.DataObject) -> None:
    keys = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, blacklist_categories=("Cs", "Cc")),
                   min_size=1, max_size=30).filter(lambda k: not k.startswith(("ackbridge-", "x-")))
    # ("x-" names are the brokers' own annotations, filtered from what comes back below.)
    headers = data.draw(st.dictionaries(keys, header_values(harness.kind), min_size=1, max_size=5))
    if harness.kind == "mqtt-3.1.1":
        with pytest.raises(InvalidOptionError, match=r"3\.1\.1 cannot carry headers"):
            conn.publish(queue, b"h", headers=headers)
        return
    got = dict(roundtrip(harness, conn, queue, b"h", headers).headers)
    got = {k: v for k, v in got.items() if not k.startswith("x-")}  # broker annotations
    assert {k: (type(v), v) for k, v in got.items()} == {k: (type(v), v) for k, v in headers.items()}


@settings(max_examples=10, deadline=None, suppress_health_check=FIXTURES)
@given(value=st.one_of(st.sets(st.integers(), max_size=2), st.lists(st.integers(), max_size=2),
                       st.integers(min_value=2**63), st.integers(max_value=-(2**63) - 1),
                       st.dictionaries(st.text(), st.text(), max_size=1), st.text().map(lambda t: t + "\udcff")))
def test_header_values_no_wire_carries_are_refused_before_sending(harness: Any, conn: ackbridge.Connection,
                                                                  value: object) -> None:
    with pytest.raises(InvalidOptionError, match="header 'k'"):
        conn.publish("never-used", b"x", headers={"k": value})


def test_header_names_no_wire_carries_are_refused(harness: Any, conn: ackbridge.Connection) -> None:
    for bad in ({"k" * 256: 1}, {"é" * 128: 1}, {1: 1}, {"": 1}):
        with pytest.raises(InvalidOptionError, match="header name"):
            conn.publish("never-used", b"x", headers=bad)  # type: ignore[arg-type]


def test_broker_specific_header_refusals_leave_the_connection_whole(harness: Any, conn: ackbridge.Connection,
                                                                    queue: str) -> None:
    """What one wire cannot carry is an InvalidOptionError for that publish alone: the
    publishes before and after are confirmed and delivered, each with its own confirm."""
    refused: list[dict[str, Any]] = []
    if harness.kind == "rabbitmq":
        refused = [{"f": 1.5}, {"inf": float("inf")}]
    elif harness.kind == "mqtt-5":
        refused = [{"k": text} for text in MQTT_BAD_TEXT] + [{text: "v"} for text in MQTT_BAD_TEXT]
    elif harness.kind == "mqtt-3.1.1":
        refused = [{"any": "header"}]
    before = conn.publish(harness.publish_target(queue), b"before", message_id="before" if refused else None)
    for headers in refused:
        with pytest.raises(InvalidOptionError):
            conn.publish(harness.publish_target(queue), b"never", headers=headers)
    after = conn.publish(harness.publish_target(queue), b"after")
    assert before.result(timeout=30).status is ConfirmStatus.CONFIRMED
    assert after.result(timeout=30).status is ConfirmStatus.CONFIRMED
    with conn.consume(queue, prefetch=5) as consumer:
        bodies = []
        for _ in range(2):
            delivery = consumer.get(timeout=20)
            assert delivery is not None
            bodies.append(delivery.body)
            delivery.ack()
        assert consumer.get(timeout=0.3) is None
    assert bodies == [b"before", b"after"]


# ---- labels, URLs, options, destinations -----------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=FIXTURES)
@given(label=st.one_of(st.text(max_size=120).filter(lambda t: not (3 <= len(t) <= 100 and t.isascii()
                                                                   and t.replace("-", "").replace("_", "")
                                                                   .replace(":", "").isalnum())),
                       st.integers(), st.none(), st.binary(max_size=5)))
def test_invalid_labels_are_refused_before_sending(harness: Any, conn: ackbridge.Connection, label: object) -> None:
    with pytest.raises(InvalidLabelError):
        conn.publish("never-used", b"x", requested_acks=(label,))  # type: ignore[arg-type]


def test_reserved_label_cannot_be_issued(harness: Any, conn: ackbridge.Connection, queue: str) -> None:
    assert conn.publish(harness.publish_target(queue), b"lbl").result(timeout=30).confirmed
    with conn.consume(queue, prefetch=1) as consumer:
        delivery = consumer.get(timeout=20)
        assert delivery is not None
        for label in ("broker-persisted", "spark-committed", "x", "bad label"):
            with pytest.raises(InvalidLabelError):
                delivery.acknowledge(label, 200)
        with pytest.raises(InvalidLabelError, match="HTTP status"):
            delivery.acknowledge("db-written", 99)
        assert not delivery.settled
        delivery.ack()


def _scheme(harness: Any) -> str:
    return str(harness.url()).split("://", 1)[0]


def test_malformed_urls_give_configuration_errors_fast(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    scheme = _scheme(harness)
    bad = [f"{scheme}//guest:pw@127.0.0.1", f"{scheme}://guest:pw@127.0.0.1:99999/",
           f"{scheme}://guest:pw@127.0.0.1:abc/", f"{scheme}://guest:pw@[::1/", f"{scheme}://gu est:pw@127.0.0.1/",
           f"{scheme}://127.0.0.1:1/?prefetch=", f"{scheme}://127.0.0.1:1/?no_such_option=1",
           f"{scheme}://127.0.0.1:1/?prefetch=1&&", f"{scheme}://127.0.0.1:1/?window=-1"]
    # "Fast" as an event, not a time: refused before any connection is opened (no network
    # attempt, so no connect timeout to wait out).
    opened: list[str] = []

    def no_open(self: ackbridge.Connection) -> ackbridge.Connection:
        opened.append(str(self.url.redacted))
        raise AssertionError(f"a malformed URL reached Connection.open(): {self.url.redacted}")

    monkeypatch.setattr(ackbridge.Connection, "open", no_open)
    for url in bad:
        with pytest.raises(ConfigurationError):
            ackbridge.connect(url, **harness.connect_options()).close()
    assert opened == []


@settings(max_examples=10, deadline=None, suppress_health_check=FIXTURES)
@given(data=st.data())
def test_arbitrary_option_values_give_invalid_option_error_or_work(harness: Any, data: st.DataObject) -> None:
    spec = registry().adapter(harness.url().split("://", 1)[0])
    names = sorted({s.name for s in spec.option_specs} | {"prefetch", "window", "confirm_timeout",
                                                                    "conflate_ms", "max_deliveries", "bogus"})
    name = data.draw(st.sampled_from(names))
    value = data.draw(st.one_of(st.text(max_size=12), st.integers(-5, 5), st.floats(allow_nan=True),
                                st.booleans(), st.none()))
    options = {**harness.connect_options(), "connect_timeout": 5, name: value}
    options = {k: v for k, v in options.items() if k in names or k == "queue_type"}
    # No time bound: the call returns (an error or an open connection); a hang fails at
    # the suite's per-test timeout.
    try:
        ackbridge.connect(harness.url(), **options).close()
    except InvalidOptionError:
        pass
    except AckbridgeError as exc:  # a valid but useless value, e.g. a tls_ca_file on a plain URL
        assert not isinstance(exc, ackbridge.SettlementError), exc


BAD_DESTINATIONS = ["", "x" * 300, "a\x00b", "c\x01d", "a/#", "+", "sp ace", "\ufffe", "é" * 100]

@pytest.mark.parametrize("verb", ["declare", "consume", "publish"])
@pytest.mark.parametrize("name", BAD_DESTINATIONS, ids=[f"dest{i}" for i in range(len(BAD_DESTINATIONS))])
def test_bad_queue_names_give_an_error_or_an_outcome_and_the_connection_survives(
        harness: Any, verb: str, name: str) -> None:
    target = name
    if harness.kind == "amqp10" and name not in ("", "+"):
        target = f"/amq/queue/{uuid.uuid4().hex[:6]}{name}"
    options = {**harness.connect_options(), "confirm_timeout": 5}
    if not harness.kind.startswith("amqp") and harness.kind != "embedded":
        options["connect_timeout"] = 5
    with ackbridge.connect(harness.url(), **options) as fresh:
        # Each call answers (an outcome or an error) within its own bound (confirm_timeout,
        # connect_timeout, result(timeout=15)); no wall-clock assert on top.
        try:
            if verb == "declare":
                fresh.declare_queue(target)
            elif verb == "consume":
                fresh.consume(target, prefetch=1).close()
            else:
                outcome = fresh.publish(target, b"x").result(timeout=15)
                assert outcome.status is not ConfirmStatus.UNKNOWN or "broker" in outcome.reason, outcome
        except AckbridgeError:
            pass
        queue = harness.new_queue()
        assert fresh.publish(harness.publish_target(queue), b"still works").result(timeout=15).confirmed
    rabbit_declared = harness.kind in ("rabbitmq", "rabbitmq-streams") and verb == "declare"
    if name and (rabbit_declared or (harness.kind == "amqp10" and target == name)):
        # Names RabbitMQ accepts ('+', 'sp ace', 'a\x00b' as a stream...) were really declared:
        # leave the broker clean (the management API deletes streams too).
        from tests.rabbitmq.harness import delete_exchange, delete_queue

        for created in (name, f"{name}.dlq"):
            delete_queue(created)
        delete_exchange(f"{name}.dlx")
