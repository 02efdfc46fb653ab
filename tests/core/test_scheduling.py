"""The suite's own scheduling over xdist workers (tests/scheduling.py): a file is one unit,
the files of long SIGKILL tests are split, long files with a module fixture are dealt into
a few units, and the longest units are handed out first."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import CHUNKED_FILES, SPLIT_FILES, UNMEASURED, longest_first, measured, units_of

ROOT = Path(__file__).resolve().parents[2]


def test_a_file_is_one_unit_a_split_file_one_per_test_a_chunked_file_round_robin() -> None:
    split = sorted(SPLIT_FILES)[0]
    chunked, chunks = sorted(CHUNKED_FILES.items())[0]
    ids = ["tests/a.py::t1", "tests/a.py::t2", f"{split}::k1", f"{split}::k2",
           *(f"{chunked}::c{i}" for i in range(chunks + 1))]
    units = units_of(ids)
    assert units["tests/a.py::t1"] == units["tests/a.py::t2"] == "tests/a.py"
    assert units[f"{split}::k1"] != units[f"{split}::k2"]
    dealt = [units[f"{chunked}::c{i}"] for i in range(chunks + 1)]
    assert len(set(dealt)) == chunks and dealt[0] == dealt[chunks]


def test_longest_units_first_and_each_unit_keeps_its_order() -> None:
    split = sorted(SPLIT_FILES)[0]
    ids = ["a.py::t1", "b.py::t1", "a.py::t2", f"{split}::k1", f"{split}::k2", "c.py::t1"]
    seconds = {"a.py::t1": 5, "a.py::t2": 5, "b.py::t1": 30, f"{split}::k1": 20, f"{split}::k2": 60}
    assert longest_first(ids, seconds) == [f"{split}::k2", "b.py::t1", f"{split}::k1", "a.py::t1", "a.py::t2",
                                           "c.py::t1"]
    assert UNMEASURED < 5  # the unmeasured c.py went last


def test_the_measured_durations_name_the_files_scheduled_by_name() -> None:
    # A stale file only misorders; but one that misses the long files is not this suite's.
    seconds = measured()
    assert seconds, "tests/durations.json is missing: scripts/durations.py writes it from a full run"
    files = {nodeid.split("::", 1)[0] for nodeid in seconds}
    for path in [*SPLIT_FILES, *CHUNKED_FILES]:
        assert (ROOT / path).is_file(), f"{path} is scheduled by name but does not exist"
        assert path in files, f"{path} has no measured duration"
