#!/usr/bin/env bash
# Set up on a fresh machine and run the main job on the embedded broker (no server needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"  # a local[*] job needs no other interface
exec .venv/bin/ackbridge demo "$@"
