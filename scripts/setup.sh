#!/usr/bin/env bash
# Create .venv and install ackbridge (core + embedded broker), every plugin and the Spark
# connector, editable, at the exact versions of constraints.txt (the distributions ask for ranges).
# scripts/test-lowest.sh sets VENV, CONSTRAINTS, EXTRAS and SKIP_SPARK for the lowest supported versions.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
CONSTRAINTS=${CONSTRAINTS:-constraints.txt}
if [ "${SKIP_SPARK:-0}" != 1 ] && ! command -v java >/dev/null 2>&1; then
    echo "[setup] installing Java 17 for PySpark"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV"
    "$PY" -m venv "$VENV"
fi
quiet() { grep -v "^WARNING: Location" || true; }
"$VENV/bin/python" -m pip install -q --upgrade "pip>=24" 2>&1 | quiet
# The embedded broker used to be its own distribution; it now ships inside ackbridge.
if "$VENV/bin/python" -m pip show -q ackbridge-local >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip uninstall -q -y ackbridge-local 2>&1 | quiet
fi
# postgres: psycopg 3 for ackbridge.transactional on PostgreSQL (tests/transactional).
editables=(-e ".[${EXTRAS:-test,docs,package,postgres,bench}]")
for dir in plugins/*/ spark_connector/; do
    [ "${SKIP_SPARK:-0}" = 1 ] && [ "$dir" = spark_connector/ ] && continue
    # The connector with its Spark Connect extra: the Connect tests need grpc (no silent skip).
    [ "$dir" = spark_connector/ ] && { editables+=(-e "${dir}[connect]"); continue; }
    [ -f "$dir/pyproject.toml" ] && editables+=(-e "$dir")
done
echo "[setup] installing ackbridge, plugins and connector ($CONSTRAINTS)"
log=$(mktemp)
if ! "$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" "setuptools>=77" "${editables[@]}" >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; exit 1
fi
rm -f "$log"
"$VENV/bin/python" -c "import ackbridge, ackbridge_local" >/dev/null
