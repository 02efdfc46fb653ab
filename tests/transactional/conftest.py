"""Fixtures of the transactional tests: the application's database (sqlite3 file,
PostgreSQL) and the broker (embedded, RabbitMQ), each a required service in CI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_port
from tests.transactional.appdb import AppDb

DATABASES = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]
BROKERS = [pytest.param("local", id="embedded"), pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq)]


def make_db(kind: str, tmp_path: Path) -> AppDb:
    if kind == "postgres":
        require_port(5432, "PostgreSQL")
        return AppDb.postgres()
    return AppDb.sqlite(tmp_path)


def make_harness(kind: str, tmp_path: Path) -> Any:
    if kind == "rabbitmq":
        require_port(5672, "RabbitMQ")
        require_port(15672, "RabbitMQ management API")
        from tests.rabbitmq.harness import RabbitHarness

        return RabbitHarness()
    from tests.local.harness import LocalHarness

    return LocalHarness(tmp_path)


@pytest.fixture(params=DATABASES)
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    db = make_db(request.param, tmp_path)
    db.create_effects()
    try:
        yield db
    finally:
        db.drop_all()


@pytest.fixture(params=BROKERS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    found = make_harness(request.param, tmp_path)
    try:
        yield found
    finally:
        found.cleanup()
