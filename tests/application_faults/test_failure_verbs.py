"""What a failed handler's verb really does on the broker, and what ackbridge says it did.

Issue 32, findings 6 and 7: a handler that raises has its delivery rejected; on a queue
without a dead-letter target that reject DISCARDS the message, so the log must not say
"dead-lettered", and ``consume()`` warns once when it can tell. A requeue loop (every
delivery of a poison message requeued) is not bounded by default: ackbridge warns,
naming ``max_deliveries``. Each test checks what the broker holds, not what the client
believes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ackbridge
from ackbridge.capabilities import RejectFate
from ackbridge.kernel.requeue_loops import EVERY, QUIET_S, RequeueWatch
from ackbridge.messages import InboundMessage
from ackbridge.plugins import registry
from tests.conftest import require_port

RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/"
_MGMT = "http://127.0.0.1:15672/api/queues/%2F/"
_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def _queue(prefix: str) -> str:
    return f"ab-test-failverb-{prefix}-{uuid.uuid4().hex[:10]}"


def _rabbit_queue(name: str) -> dict[str, Any] | None:
    """The management API's view of *name* (None: no such queue)."""
    request = urllib.request.Request(_MGMT + urllib.parse.quote(name, safe=""), headers={"Authorization": _AUTH})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            found: dict[str, Any] = json.loads(response.read())
            return found
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _depths(conn: Any, name: str) -> tuple[int | None, int | None]:
    """(ready messages of *name*, ready messages of its dead-letter companion) by passive declare."""
    info = conn.inspect_queue(name)
    return info.messages, info.dead_lettered


def _failed_records(caplog: pytest.LogCaptureFixture, queue: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("ackbridge") and "handler raised" in r.getMessage()
            and repr(queue) in r.getMessage()]


def _no_target_warnings(caplog: pytest.LogCaptureFixture, queue: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("ackbridge") and r.levelno == logging.WARNING
            and "no dead-letter target" in r.getMessage() and repr(queue) in r.getMessage()]


def _raise(delivery: Any) -> None:
    raise RuntimeError("a transient failure in the application")


@pytest.fixture
def rabbit() -> Iterator[Any]:
    require_port(5672, "RabbitMQ")
    require_port(15672, "RabbitMQ management API")
    with ackbridge.connect(RABBIT_URL) as conn:
        yield conn


# ---- finding 6: the failure verb's text is true ------------------------------------------
@pytest.mark.rabbitmq
def test_rabbitmq_reject_without_dead_letter_says_discarded(rabbit: Any, caplog: pytest.LogCaptureFixture) -> None:
    queue = _queue("nodlx")
    caplog.set_level(logging.INFO, logger="ackbridge")
    rabbit.declare_queue(queue, dead_letter=False)
    try:
        assert rabbit.publish(queue, b"poison", message_id="m1").result(10).status.value == "confirmed"
        consumer = rabbit.consume(queue, handler=_raise)
        consumer2 = rabbit.consume(queue, handler=_raise)  # a second consumer of the same queue: no second warning
        consumer2.close()
        _wait_for(lambda: bool(_failed_records(caplog, queue)), "the handler's failure to be logged")
        # The broker holds nothing: the message is gone, not in a dead-letter queue.
        _wait_for(lambda: (_rabbit_queue(queue) or {}).get("messages") == 0, "the queue to be empty")
        assert _rabbit_queue(queue + ".dlq") is None
        consumer.close()
        text = _failed_records(caplog, queue)[0].getMessage()
        assert "discarded" in text, text
        assert "dead-lettered" not in text, text
        assert len(_no_target_warnings(caplog, queue)) == 1, [r.getMessage() for r in caplog.records]
    finally:
        rabbit.delete_queue(queue, dead_letter=False)


@pytest.mark.rabbitmq
def test_rabbitmq_queue_declared_elsewhere_without_companion_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A queue another connection declared without a dead-letter target: consume() can
    still tell (no companion QUEUE.dlq), and the failure log says discarded."""
    require_port(5672, "RabbitMQ")
    queue = _queue("elsewhere")
    caplog.set_level(logging.INFO, logger="ackbridge")
    with ackbridge.connect(RABBIT_URL) as other:
        other.declare_queue(queue, dead_letter=False)
    try:
        with ackbridge.connect(RABBIT_URL) as conn:
            conn.publish(queue, b"poison", message_id="m1").result(10)
            consumer = conn.consume(queue, handler=_raise)
            _wait_for(lambda: bool(_failed_records(caplog, queue)), "the handler's failure to be logged")
            consumer.close()
            assert conn.inspect_queue(queue).messages == 0
        text = _failed_records(caplog, queue)[0].getMessage()
        assert "discarded" in text and "dead-lettered" not in text, text
        assert len(_no_target_warnings(caplog, queue)) == 1
    finally:
        with ackbridge.connect(RABBIT_URL) as conn:
            conn.delete_queue(queue, dead_letter=False)


@pytest.mark.rabbitmq
def test_rabbitmq_reject_with_dead_letter_says_dead_lettered(rabbit: Any, caplog: pytest.LogCaptureFixture) -> None:
    queue = _queue("dlx")
    caplog.set_level(logging.INFO, logger="ackbridge")
    rabbit.declare_queue(queue)
    try:
        rabbit.publish(queue, b"poison", message_id="m1").result(10)
        consumer = rabbit.consume(queue, handler=_raise)
        _wait_for(lambda: _depths(rabbit, queue) == (0, 1), "the message to reach the dead-letter queue")
        consumer.close()
        dlq = _rabbit_queue(queue + ".dlq")
        assert dlq is not None
        text = _failed_records(caplog, queue)[0].getMessage()
        assert "dead-lettered" in text and "discarded" not in text, text
        assert queue + ".dlq" in text, text
        assert not _no_target_warnings(caplog, queue)
    finally:
        rabbit.delete_queue(queue)


@pytest.mark.parametrize("dead_letter", [False, True])
def test_embedded_reject_text(dead_letter: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ackbridge")
    with tempfile.TemporaryDirectory() as tmp, ackbridge.connect(f"local://{os.path.join(tmp, 'b.db')}") as conn:
        queue = _queue("local")
        conn.declare_queue(queue, dead_letter=dead_letter)
        conn.publish(queue, b"poison", message_id="m1").result(10)
        consumer = conn.consume(queue, handler=_raise)
        _wait_for(lambda: bool(_failed_records(caplog, queue)), "the handler's failure to be logged")
        _wait_for(lambda: conn.inspect_queue(queue).messages == 0, "the queue to be empty")
        consumer.close()
        info = conn.inspect_queue(queue)
        text = _failed_records(caplog, queue)[0].getMessage()
        if dead_letter:
            assert info.dead_lettered == 1
            assert "dead-lettered" in text and queue + ".dlq" in text, text
            assert not _no_target_warnings(caplog, queue)
        else:
            assert info.dead_letter is None
            assert "discarded" in text and "dead-lettered" not in text, text
            assert len(_no_target_warnings(caplog, queue)) == 1


# ---- finding 7: requeue loops ----------------------------------------------------------------
def _requeue_loop(conn: Any, queue: str, caplog: pytest.LogCaptureFixture, **consume: Any) -> int:
    """Requeue one poison message with process(requeue=True) until the loop warning shows; how many deliveries."""
    deliveries = 0
    deadline = time.monotonic() + 60
    with conn.consume(queue, prefetch=1, **consume) as consumer:
        while not _loop_warnings(caplog):
            assert time.monotonic() < deadline, f"no requeue-loop warning after {deliveries} deliveries"
            delivery = consumer.get(timeout=10)
            assert delivery is not None
            deliveries += 1
            with contextlib.suppress(RuntimeError), delivery.process(requeue=True):
                raise RuntimeError("poison")
    return deliveries


def _loop_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("ackbridge") and r.levelno == logging.WARNING
            and "requeue" in r.getMessage() and "max_deliveries" in r.getMessage()]


@pytest.mark.rabbitmq
def test_rabbitmq_requeue_loop_warns(rabbit: Any, caplog: pytest.LogCaptureFixture) -> None:
    queue = _queue("loop")
    caplog.set_level(logging.INFO, logger="ackbridge")
    rabbit.declare_queue(queue)
    try:
        rabbit.publish(queue, b"poison", message_id="m1").result(10)
        seen = _requeue_loop(rabbit, queue, caplog)
        warnings = _loop_warnings(caplog)
        assert len(warnings) == 1, [w.getMessage() for w in warnings]
        text = warnings[0].getMessage()
        assert repr(queue) in text and "not bounded" in text, text
        assert "queue_type=quorum" in text, text  # classic queues: max_deliveries needs a quorum queue
        assert seen <= 200, seen
        # The broker still holds the message: requeued, never lost.
        _wait_for(lambda: (_rabbit_queue(queue) or {}).get("messages") == 1, "the message back in the queue")
    finally:
        rabbit.delete_queue(queue)


def test_embedded_requeue_loop_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ackbridge")
    with tempfile.TemporaryDirectory() as tmp, ackbridge.connect(f"local://{os.path.join(tmp, 'b.db')}") as conn:
        queue = _queue("localloop")
        conn.declare_queue(queue)
        conn.publish(queue, b"poison", message_id="m1").result(10)
        _requeue_loop(conn, queue, caplog)
        text = _loop_warnings(caplog)[0].getMessage()
        assert "max_deliveries" in text and repr(queue) in text, text
        assert conn.inspect_queue(queue).messages == 1


def test_requeue_of_first_deliveries_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    """Requeueing messages delivered for the first time (a consumer handing back work) is no loop."""
    caplog.set_level(logging.INFO, logger="ackbridge")
    with tempfile.TemporaryDirectory() as tmp, ackbridge.connect(f"local://{os.path.join(tmp, 'b.db')}") as conn:
        queue = _queue("fresh")
        conn.declare_queue(queue)
        for i in range(150):
            conn.publish(queue, b"x", message_id=str(i))
        assert conn.flush(10)
        requeued = 0
        with conn.consume(queue, prefetch=200) as consumer:
            while requeued < 150:
                delivery = consumer.get(timeout=10)
                assert delivery is not None
                if delivery.redelivered:
                    delivery.ack()
                    continue
                requeued += 1
                with contextlib.suppress(RuntimeError), delivery.process(requeue=True):
                    raise RuntimeError("hand it back")
        assert not _loop_warnings(caplog)


# ---- the data behind both ----------------------------------------------------------------------
#: What each shipped adapter declares its reject does.
EXPECTED_FATES = {
    "nats-jetstream": {RejectFate.DEAD_LETTERS},
    "embedded": {RejectFate.DEAD_LETTERS_IF_TARGET},
    "rabbitmq": {RejectFate.DEAD_LETTERS_IF_TARGET},
    "amqp10": {RejectFate.DEAD_LETTERS_IF_TARGET},
    "mqtt5": {RejectFate.DEAD_LETTERS},
    "mqtt3.1.1": {RejectFate.DEAD_LETTERS_IF_TARGET},
    "rabbitmq-streams": {RejectFate.NO_REJECT},
}


def test_every_shipped_adapter_declares_what_reject_does() -> None:
    found: dict[str, set[RejectFate]] = {}
    for spec in registry().specs():
        for caps in (spec.capabilities, *spec.variants):
            found.setdefault(caps.broker, set()).add(caps.reject_outcome.fate)
            assert caps.requeue_bound, caps.broker
    assert found == EXPECTED_FATES, "every shipped adapter declares what its reject does"


def test_requeue_watch_counts_redeliveries_and_is_rate_limited() -> None:
    now = [0.0]
    watch = RequeueWatch(clock=lambda: now[0])
    fresh = InboundMessage(wire_tag=1, generation=1, body=b"", source="q")
    again = InboundMessage(wire_tag=1, generation=1, body=b"", source="q", redelivered=True, delivery_count=7)
    assert all(watch.requeued(fresh) is None for _ in range(500))  # first deliveries handed back: no loop
    found = [watch.requeued(again) for _ in range(EVERY)]
    assert found[:-1] == [None] * (EVERY - 1) and found[-1] == (EVERY, 7)
    assert all(watch.requeued(again) is None for _ in range(10 * EVERY))  # quiet for QUIET_S
    now[0] += QUIET_S
    assert watch.requeued(again) == (10 * EVERY + 1, 7)


@pytest.mark.asyncio
async def test_async_face_warns_once_too(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    caplog.set_level(logging.INFO, logger="ackbridge")
    with tempfile.TemporaryDirectory() as tmp:
        async with await ackbridge.connect_async(f"local://{os.path.join(tmp, 'b.db')}") as conn:
            queue = _queue("async")
            await conn.declare_queue(queue, dead_letter=False)
            first = await conn.consume(queue)
            second = await conn.consume(queue)
            deadline = time.monotonic() + 10
            while not _no_target_warnings(caplog, queue):
                assert time.monotonic() < deadline, "no warning from the async face"
                await asyncio.sleep(0.02)
            await first.close()
            await second.close()
            assert len(_no_target_warnings(caplog, queue)) == 1
