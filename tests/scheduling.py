"""How the suite's tests are spread over pytest-xdist workers (``--longest-first``).

``scripts/test.sh`` runs ``-n 3 --longest-first``; ``tests/conftest.py`` then
hands xdist :class:`LongestFirst`. The rule:

* a test file is one unit of work: its module fixtures (a Spark session, a
  TLS broker) start once per run, on one worker;
* a file in :data:`SPLIT_FILES` is split, one unit per test: its tests share
  nothing costly and are long (Spark jobs SIGKILLed and restarted), so the
  whole file on one worker would be the run's tail;
* a file in :data:`CHUNKED_FILES` is dealt round-robin into that many units:
  long files whose module fixture (a Spark session) is worth starting a few
  times, not once per test;
* units start longest first, by the durations a full run measured
  (``tests/durations.json``, written by ``scripts/durations.py``; a test not
  measured counts :data:`UNMEASURED` s): xdist hands units out in order, so
  the long ones are not left for the end.

Why not ``--dist loadgroup`` with an ``xdist_group`` per file: xdist 3.8 puts
the group into ``item._nodeid``, which pytest 9.2 no longer reads
(``Node.nodeid`` is built from ``_id``), so every test became a unit of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

DURATIONS = Path(__file__).with_name("durations.json")
#: Seconds assumed for a test no full run has measured yet (most tests take less).
UNMEASURED = 1.0
#: Files whose tests are units of their own (no module fixture among them).
SPLIT_FILES = frozenset({
    "tests/spark/test_exactly_once.py",
    "tests/spark/test_stream_exactly_once.py",
    "tests/spark/test_driver_kill.py",
})
#: Files dealt into this many units (each unit starts the file's module fixtures once).
CHUNKED_FILES = {
    "tests/spark/test_source.py": 3,
    "tests/rabbitmq/test_conformance_rabbitmq.py": 2,
    "tests/amqp10/test_conformance_amqp10.py": 2,
}


def measured() -> dict[str, float]:
    """Seconds per test node id (setup, call and teardown), as the last full run measured."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except FileNotFoundError:
        return {}


def units_of(nodeids: Sequence[str]) -> dict[str, str]:
    """The unit each node id runs in: its file, itself (a split file), or its file's
    chunk (the tests of a chunked file dealt round-robin, in collection order)."""
    units: dict[str, str] = {}
    position: dict[str, int] = {}
    for nodeid in nodeids:
        path = nodeid.split("::", 1)[0]
        if path in SPLIT_FILES:
            units[nodeid] = nodeid
        elif path in CHUNKED_FILES:
            index = position[path] = position.get(path, -1) + 1
            units[nodeid] = f"{path}#{index % CHUNKED_FILES[path]}"
        else:
            units[nodeid] = path
    return units


def longest_first(nodeids: Sequence[str], seconds: dict[str, float]) -> list[str]:
    """*nodeids* grouped by unit, the longest units first (each unit keeps its order)."""
    unit = units_of(nodeids)
    total: dict[str, float] = {}
    for nodeid in nodeids:
        total[unit[nodeid]] = total.get(unit[nodeid], 0.0) + seconds.get(nodeid, UNMEASURED)
    first_seen = {u: i for i, u in reversed(list(enumerate(unit[n] for n in nodeids)))}
    return sorted(nodeids, key=lambda nodeid: (-total[unit[nodeid]], first_seen[unit[nodeid]]))


class LongestFirst(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """xdist's scope scheduling, with :func:`units_of` as the scopes and the units in
    :func:`longest_first` order (the workers' collection is reordered as it arrives)."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._seconds = measured()
        self._units: dict[str, str] = {}

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        self._units = units_of(collection)
        super().add_node_collection(node, longest_first(collection, self._seconds))

    def _split_scope(self, nodeid: str) -> str:
        return self._units[nodeid]
