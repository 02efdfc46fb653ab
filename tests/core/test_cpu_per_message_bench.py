"""benchmarks/cpu_per_message.py runs end to end on the embedded broker (no broker server needed).

A tiny run: its options are parsed, each side's CPU is read over its timed
section (benchmarks/cpu_clock.py) and the Markdown table has one row per
embedded row with a positive figure on both sides.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cpu_per_message.py"
ROWS = ("embedded sync publish+confirms", "embedded async publish+confirms", "embedded sync consume+ack",
        "embedded async consume+ack", "embedded sync publish+confirms (persist-queue)",
        "embedded sync consume+ack, get() (persist-queue)")
HAS_PERSIST_QUEUE = importlib.util.find_spec("persistqueue") is not None


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=240, check=False)


def test_a_tiny_embedded_run_prints_a_row_per_side_with_cpu_per_message() -> None:
    done = _run("--n", "200", "--rounds", "1", "--only", "embedded", "--markdown")
    assert done.returncode == 0, done.stderr[-2000:]
    table = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| embedded")}
    assert sorted(table) == sorted(ROWS)
    for name, line in table.items():
        if "persist-queue" in name and not HAS_PERSIST_QUEUE:
            # The lowest-versions tier installs no `bench` extra: the row stands, naming what is missing.
            assert "persist-queue not installed (the bench extra)" in line, line
            assert float(line.split("|")[2]) > 0, line
            continue
        ackbridge_us, raw_us = (float(x) for x in re.findall(r"\|\s*([\d.]+)\s*(?:\(|\|)", line)[:2])
        assert ackbridge_us > 0 and raw_us > 0, line


def test_an_unknown_plugin_is_refused_with_the_known_ones() -> None:
    done = _run("--only", "kafka")
    assert done.returncode == 2
    assert "unknown plugin(s) kafka" in done.stderr and "embedded" in done.stderr
