"""One logger tree, client-library noise below INFO, warnings that say where."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ackbridge
from tests.local.harness import LocalHarness

ROOT = Path(__file__).parent.parent.parent


def test_every_logger_is_in_the_ackbridge_tree() -> None:
    names = set()
    for folder in ("ackbridge", "plugins", "spark_connector"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name in ("logs.py", "log_filter.py"):
                continue  # name the client libraries' loggers (to quiet or filter them)
            names.update(re.findall(r"getLogger\(([^)]*)\)", path.read_text()))
    assert names, "no loggers found"
    # Every logger is "ackbridge" or one level below it (a plugin's or the connector's).
    outside = {name for name in names if not re.fullmatch(r'"ackbridge(\.[a-z0-9_]+)?"', name)}
    assert not outside, outside


def test_client_libraries_quieted_unless_configured(tmp_path: Path) -> None:
    """A connection quiets the client loggers its plugin declares (AdapterSpec.client_loggers),
    leaves one the application configured, and touches no other library's logger."""
    code = """
import logging
logging.getLogger("aiormq").setLevel(logging.DEBUG)  # the application's choice stays
import ackbridge
from tests.rabbitmq.harness import RabbitHarness
h = RabbitHarness()
with ackbridge.connect(h.url()):
    pass
print(logging.getLogger("pika").level, logging.getLogger("aiormq").level, logging.getLogger("proton").level,
      logging.getLogger().level)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert out == [str(logging.WARNING), str(logging.DEBUG), str(logging.NOTSET), str(logging.WARNING)]


def test_handler_failure_warning_names_broker_destination_generation(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url()) as conn:
            conn.publish(queue, b"boom").result(timeout=30)

            def handler(delivery: ackbridge.Delivery) -> None:
                raise ValueError("handler failed")

            with caplog.at_level(logging.WARNING, logger="ackbridge"):
                consumer = conn.consume(queue, handler=handler)
                ackbridge.testing.eventually(lambda: any(r.levelno >= logging.ERROR for r in caplog.records))
                consumer.close()
        (record,) = [r for r in caplog.records if r.name == "ackbridge"]
        assert record.ackbridge_destination == queue  # type: ignore[attr-defined]
        assert record.ackbridge_broker == conn.broker  # type: ignore[attr-defined]
        assert isinstance(record.ackbridge_generation, int)  # type: ignore[attr-defined]
        assert queue in record.getMessage() and "generation" in record.getMessage()
    finally:
        harness.cleanup()


def test_every_shipped_plugin_declares_its_system_and_client_loggers() -> None:
    """The core names no broker: each shipped plugin says what its connections are
    (messaging.system) and which client library loggers it drives."""
    from ackbridge.plugins import registry

    declared = {spec.name: (spec.messaging_system, spec.client_loggers) for spec in registry().specs()}
    assert declared["rabbitmq"] == ("rabbitmq", ("pika", "aio_pika", "aiormq"))
    assert declared["mqtt"] == ("mqtt", ("paho", "paho.mqtt"))
    assert declared["amqp10"] == ("amqp", ("proton",))
    assert declared["nats"] == ("nats", ("nats",))
    assert declared["embedded"] == ("ackbridge_local", ())
    streams = next(v for name, v in declared.items() if "stream" in name)
    assert streams == ("rabbitmq", ("rstream",))
