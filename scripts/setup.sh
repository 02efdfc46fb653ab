#!/usr/bin/env bash
# Create .venv and install ackbridge, every plugin and the Spark connector (pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v java >/dev/null 2>&1; then
    echo "[setup] installing Java 17 for PySpark"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade "pip>=24" 2>&1 | grep -v "^WARNING: Location" || true
editables=(-e ".[test]")
for dir in plugins/*/ spark_connector/; do
    [ -f "$dir/pyproject.toml" ] && editables+=(-e "$dir")
done
echo "[setup] installing ackbridge, plugins and connector"
.venv/bin/python -m pip install -q "${editables[@]}" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import ackbridge" >/dev/null
