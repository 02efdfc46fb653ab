"""AMQP 1.0 tests need RabbitMQ with rabbitmq_amqp1_0 and rabbitmq_management.

When the broker is unreachable the tests FAIL in CI (CI=true) and skip locally.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.amqp10.harness import Amqp10Harness, create_user, delete_if_unused, delete_user
from tests.conftest import IN_CI, require_port

_PLUGINS = ("rabbitmq_amqp1_0", "rabbitmq_management")
_checked = False


def _ensure_plugins() -> None:
    global _checked
    if _checked:
        return
    if shutil.which("rabbitmq-plugins") is None:
        message = "rabbitmq-plugins not found: install rabbitmq-server"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    listed = subprocess.run(["rabbitmq-plugins", "list", "-e", "-m"], capture_output=True, text=True,
                            timeout=60).stdout.split()
    missing = [p for p in _PLUGINS if p not in listed]
    if missing:
        subprocess.run(["rabbitmq-plugins", "enable", *missing], capture_output=True, timeout=120, check=True)
    _checked = True


@pytest.fixture
def broker() -> None:
    require_port(5672, "RabbitMQ (AMQP 1.0)")
    _ensure_plugins()
    require_port(15672, "RabbitMQ management API")


@pytest.fixture(scope="session")
def canary_user() -> Iterator[tuple[str, str]]:
    """(user, password): the password is a canary searched for in every message."""
    require_port(15672, "RabbitMQ management API")
    user, password = f"ab10-{uuid.uuid4().hex[:8]}", f"canary-{uuid.uuid4().hex}"
    create_user(user, password)
    yield user, password
    delete_user(user)


@pytest.fixture
def harness(broker: None, canary_user: tuple[str, str]) -> Iterator[Amqp10Harness]:
    h = Amqp10Harness(*canary_user)
    yield h
    h.cleanup()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/amqp10/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.amqp10)


@pytest.fixture(scope="session", autouse=True)
def _remove_orphaned_reply_inboxes() -> Iterator[None]:
    """RabbitMQ 3.10 never deletes an AMQP 1.0 reply inbox queue (``ackbridge.reply.<id>``,
    declared through ``/queue/``): no AMQP 1.0 address makes it auto-delete or expire, and
    AMQP 1.0 cannot delete a queue (docs/broker-quirks.md). Without an ``expires`` policy on
    the broker, delete the ones left without a consumer. Exclusive ones belong to live AMQP
    0-9-1 connections (ackbridge-rabbitmq's inboxes) and are left alone.

    Another pytest-xdist worker may be using an inbox meanwhile: the broker checks
    that it has no consumer at the moment of deletion (``if-unused``), and the
    expiry test's own inboxes (``ackbridge.reply.t<id>.``) are its to remove."""
    yield
    try:
        out = subprocess.run(["rabbitmqctl", "-q", "list_queues", "--formatter", "json", "name", "consumers",
                              "exclusive"], capture_output=True, text=True, timeout=60, check=True).stdout
        for queue in json.loads(out or "[]"):
            name = str(queue["name"])
            if (name.startswith("ackbridge.reply.") and not name.startswith("ackbridge.reply.t")
                    and not queue["exclusive"] and int(queue["consumers"]) == 0):
                delete_if_unused(name)
    except Exception as exc:  # cleanup must not fail the run
        print(f"could not remove orphaned reply inboxes: {exc}")
