"""Shared test set-up: brokers are required in CI (CI=true), never silently skipped."""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Iterator

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# Spark would bind its driver to the first non-loopback address; tests send traffic to loopback only.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every test JVM (Spark drivers, the SIGKILLed jobs, Spark Connect) lives seconds, not hours:
# C1 only. C2's compiler threads cost a short JVM about 40% more CPU (13.4 s -> 8.4 s for a
# session start, a group-by and a Parquet write, perf stat), and the suite shares two cores.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


def require_port(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Fail (in CI) or skip (locally) when nothing listens on host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as exc:
        message = f"{what} is not reachable on {host}:{port} ({exc})"
    if IN_CI:
        pytest.fail(message + " -- CI needs it; see README for how to start it")
    pytest.skip(message + " (set CI=true to make this a failure)")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--longest-first", action="store_true",
                     help="with -n: one unit of work per test file (split where tests/scheduling.py says), "
                          "the longest units first (tests/durations.json)")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if not config.getoption("longest_first"):
        return None  # xdist's own, as --dist says
    from tests.scheduling import LongestFirst

    config.option.loadscopereorder = False  # the order is LongestFirst's, not "most tests first"
    return LongestFirst(config, log)


@pytest.fixture
def no_collection() -> Iterator[None]:
    """The garbage collector off for the test: what is closed must be closed by the code,
    not found by a collection (tests of sockets closed)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
