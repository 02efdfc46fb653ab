#!/usr/bin/env bash
# The whole test suite from a fresh clone: install, start brokers, lint, type-check, test.
# Brokers are required: with CI=true a missing broker FAILS its tests, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=${CI:-true}
bash scripts/setup.sh
# Chromium for the docs layout check (tests/docs/test_docs_browser.py); a no-op when present.
bash scripts/browser.sh
bash scripts/brokers.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# Spark binds its driver to the first non-loopback address otherwise; tests talk to loopback only.
export SPARK_LOCAL_IP=127.0.0.1
stamp() { echo "[test $(date -u +%T)] $*"; }
stamp "ruff"
.venv/bin/ruff check .
stamp "mypy --strict (core)"
.venv/bin/mypy
stamp "mypy --strict (plugins, Spark connector)"
# Passed as source folders: their editable installs are import hooks, which mypy cannot follow.
# Each package is a folder with an __init__.py (the glob skips the *.egg-info beside them).
typed_packages=(plugins/*/ackbridge_*/__init__.py spark_connector/ackbridge_spark/__init__.py)
.venv/bin/mypy --strict "${typed_packages[@]%/__init__.py}"
run_pytest() {
    set +e
    .venv/bin/pytest "$@"
    local status=$?
    set -e
    if [ "$status" -eq 5 ]; then
        echo "[test] pytest collected no tests: that is a failure here" >&2
        exit 1
    fi
    [ "$status" -ne 0 ] && exit "$status"
    return 0
}
if [ "$#" -gt 0 ]; then
    echo "[test] pytest $*"
    run_pytest "$@"
    exit 0
fi
# Most tests wait on brokers and subprocesses: four workers on two cores (the measured test
# time adds up to about 80 worker-minutes; the main phase took 25 minutes on three workers,
# 19:39 on four). --longest-first (tests/scheduling.py) makes each test file one unit of work
# (its module fixtures stay on one worker), splits the files of long SIGKILL tests, and starts
# the longest units first (tests/durations.json). No test asserts a wall-clock bound, so the
# extra load changes how long a test waits, not whether it passes. Tests that stop a broker
# other tests share run alone afterwards.
workers=${PYTEST_WORKERS:-4}
stamp "pytest, $workers workers"
run_pytest -n "$workers" --longest-first -m "not stops_shared_broker and not runs_alone"
# Meanwhile the serial tests below wait on broker restarts: the fast tier on the lowest
# supported versions (no broker, no Spark) installs and runs beside them. Not during the
# parallel run: an editable install writes egg-info that the packaging test builds from.
lowest_log=$(mktemp)
trap 'rm -f "$lowest_log"' EXIT
bash scripts/test-lowest.sh >"$lowest_log" 2>&1 &
lowest_pid=$!
stamp "pytest, tests that stop a shared broker or must run alone"
run_pytest -m "stops_shared_broker or runs_alone"
stamp "fast tier on the lowest supported versions (constraints-lowest.txt), run beside the serial tests"
lowest_status=0
wait "$lowest_pid" || lowest_status=$?
cat "$lowest_log"
[ "$lowest_status" -ne 0 ] && exit "$lowest_status"
stamp "done"
