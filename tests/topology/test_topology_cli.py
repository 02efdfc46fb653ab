"""Topology verbs and the explaining CLI against real brokers, checked broker-side:
``declare`` then ``publish`` then ``consume`` on every broker, ``delete`` and
``purge`` seen in RabbitMQ's management API and in Mosquitto's sessions, and a
publish to a missing queue exiting non-zero with the broker's reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import require_port

ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))
RABBIT = "amqp://guest:guest@127.0.0.1:5672/"
MQTT = "mqtt://127.0.0.1:1883/"
AMQP10 = "amqp10://guest:guest@127.0.0.1:5672/"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="80")
    return subprocess.run([ACKBRIDGE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
                          check=False)


def ok_json(*args: str, cwd: Path) -> dict[str, object]:
    result = cli(*args, "--json", cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


@pytest.mark.rabbitmq
def test_rabbitmq_publish_to_missing_queue_fails_with_reason(tmp_path: Path) -> None:
    require_port(5672, "RabbitMQ")
    queue = f"missing-{uuid.uuid4().hex[:8]}"
    result = cli("publish", RABBIT, "-q", queue, "-n", "50", cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "refused" in result.stdout and "NO_ROUTE" in result.stdout, result.stdout
    assert "no queue" in result.stderr  # warned before publishing
    data = json.loads(cli("publish", RABBIT, "-q", queue, "-n", "5", "--json", cwd=tmp_path).stdout)
    assert data["refused"] == 5 and "NO_ROUTE" in data["reasons"][0]["reason"]


@pytest.mark.rabbitmq
def test_rabbitmq_declare_publish_consume_purge_delete(tmp_path: Path) -> None:
    require_port(15672, "RabbitMQ management API")
    from tests.rabbitmq.harness import mgmt, queue_counts

    queue = f"topo-{uuid.uuid4().hex[:8]}"
    ok_json("declare", RABBIT, "-q", queue, cwd=tmp_path)
    names = {q["name"] for q in mgmt("GET", "/queues/%2F")}
    assert {queue, f"{queue}.dlq"} <= names
    assert ok_json("publish", RABBIT, "-q", queue, "-n", "30", cwd=tmp_path)["confirmed"] == 30
    info = ok_json("inspect", RABBIT, "-q", queue, cwd=tmp_path)
    assert info["messages"] == 30 and info["consumers"] == 0 and info["dead_letter"] == f"{queue}.dlq"
    assert ok_json("consume", RABBIT, "-q", queue, "-n", "10", cwd=tmp_path)["received"] == 10
    assert ok_json("purge", RABBIT, "-q", queue, cwd=tmp_path)["messages"] == 20
    assert queue_counts()[queue] == (0, 0)  # rabbitmqctl: not the management API's lagging stats
    ok_json("delete", RABBIT, "-q", queue, cwd=tmp_path)
    names = {q["name"] for q in mgmt("GET", "/queues/%2F")}
    assert queue not in names and f"{queue}.dlq" not in names
    assert f"{queue}.dlx" not in {e["name"] for e in mgmt("GET", "/exchanges/%2F")}
    assert cli("inspect", RABBIT, "-q", queue, cwd=tmp_path).returncode == 1


@pytest.mark.rabbitmq
def test_rabbitmq_demo_leaves_no_queue(tmp_path: Path) -> None:
    require_port(15672, "RabbitMQ management API")
    from ackbridge.cli import app as cli_app
    from ackbridge.cli.output import console
    from tests.rabbitmq.harness import mgmt

    before = {q["name"] for q in mgmt("GET", "/queues/%2F")}
    with console.capture():
        cli_app.roundtrip_demo(url=RABBIT, messages=100, keep=False, as_json=False)
    after = {q["name"] for q in mgmt("GET", "/queues/%2F")}
    assert not {n for n in after - before if n.startswith("demo-")}, after - before


@pytest.mark.mqtt
def test_mqtt_declare_publish_consume_and_session_warning(tmp_path: Path) -> None:
    require_port(1883, "Mosquitto")
    from ackbridge_mqtt.sessions import derived_session_id
    from tests.mqtt.harness import peek_session

    topic = f"topo/{uuid.uuid4().hex[:8]}"
    nobody = cli("publish", MQTT, "-q", topic, "-n", "5", cwd=tmp_path)
    assert "no persistent session" in nobody.stderr, nobody.stderr
    ok_json("declare", MQTT, "-q", topic, cwd=tmp_path)
    assert ok_json("inspect", MQTT, "-q", topic, cwd=tmp_path)["dead_letter"] == f"{topic}/dlq"
    published = cli("publish", MQTT, "-q", topic, "-n", "20", cwd=tmp_path)
    assert published.returncode == 0 and "no persistent session" not in published.stderr
    assert ok_json("consume", MQTT, "-q", topic, "-n", "20", cwd=tmp_path)["received"] == 20
    assert ok_json("publish", MQTT, "-q", topic, "-n", "5", cwd=tmp_path)["confirmed"] == 5
    ok_json("purge", MQTT, "-q", topic, cwd=tmp_path)
    assert peek_session(derived_session_id(topic)) == []
    ok_json("delete", MQTT, "-q", topic, cwd=tmp_path)
    assert cli("inspect", MQTT, "-q", topic, cwd=tmp_path).returncode == 1


@pytest.mark.amqp10
def test_amqp10_declare_publish_consume(tmp_path: Path) -> None:
    require_port(5672, "RabbitMQ")
    queue = f"topo10-{uuid.uuid4().hex[:8]}"
    declared = cli("declare", AMQP10, "-q", queue, "--json", cwd=tmp_path)
    assert declared.returncode == 0, declared.stdout + declared.stderr
    assert json.loads(declared.stdout)["dead_letter"] is False
    assert "without a dead-letter companion" in declared.stderr
    assert ok_json("publish", AMQP10, "-q", f"/queue/{queue}", "-n", "20", cwd=tmp_path)["confirmed"] == 20
    assert ok_json("consume", AMQP10, "-q", f"/queue/{queue}", "-n", "20", cwd=tmp_path)["received"] == 20
    refused = cli("delete", AMQP10, "-q", queue, cwd=tmp_path)
    assert refused.returncode == 2 and "no queue management" in refused.stdout
    from tests.rabbitmq.harness import delete_queue

    delete_queue(queue)


@pytest.mark.nats
def test_nats_declare_publish_consume(tmp_path: Path) -> None:
    """JetStream: declare makes the stream and durable consumer; the stream holds what
    was published (checked on the server) until consume settles it."""
    require_port(4222, "NATS (JetStream)")
    from tests.nats.harness import NatsHarness

    server = NatsHarness()  # server-side view and clean-up (deletes the streams named below)
    subject = f"topo.{uuid.uuid4().hex[:8]}"
    try:
        from ackbridge_nats.naming import DEFAULT_DEAD_LETTER_SUBJECT, dead_letter_subject, stream_name

        server.streams += [stream_name(subject), stream_name(dead_letter_subject(DEFAULT_DEAD_LETTER_SUBJECT, subject))]
        url = "nats://127.0.0.1:4222"
        declared = cli("declare", url, "-q", subject, "--json", cwd=tmp_path)
        assert declared.returncode == 0, declared.stdout + declared.stderr
        assert ok_json("publish", url, "-q", subject, "-n", "20", cwd=tmp_path)["confirmed"] == 20
        assert server.stream_messages(subject) == 20
        assert ok_json("consume", url, "-q", subject, "-n", "20", cwd=tmp_path)["received"] == 20
        assert server.unacked(subject) == 0 and server.ready(subject) == 0
    finally:
        server.cleanup()
