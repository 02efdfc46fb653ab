#!/usr/bin/env bash
# The fast tier (no broker server, no Spark) against the lowest supported versions of the
# runtime dependencies (constraints-lowest.txt), in its own venv (.venv-lowest).
#   --prepare   only create and fill the venv (scripts/test.sh does this while other tests run)
#   --run       only run the tests (the venv must be prepared)
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
step=both
case "${1:-}" in
    --prepare) step=prepare; shift ;;
    --run) step=run; shift ;;
esac
if [ "$step" != run ]; then
combined=$(mktemp --suffix=.txt)
trap 'rm -f "$combined"' EXIT
names=$(grep -Ev '^\s*(#|$)' constraints-lowest.txt | cut -d= -f1 | tr 'A-Z_' 'a-z-')
{
    grep -Ev '^\s*(#|$)' constraints-lowest.txt
    while IFS= read -r line; do
        name=$(cut -d= -f1 <<<"$line" | tr 'A-Z_' 'a-z-')
        grep -qxF "$name" <<<"$names" || echo "$line"
    done < <(grep -Ev '^\s*(#|$)' constraints.txt)
} >"$combined"
VENV=.venv-lowest CONSTRAINTS="$combined" EXTRAS=test SKIP_SPARK=1 bash scripts/setup.sh
echo "[lowest] installed: $(.venv-lowest/bin/python -m pip list --format=freeze 2>/dev/null \
    | grep -iE '^(pluggy|typer|rich|pika|aio-pika|paho-mqtt|python-qpid-proton|rstream)==' | tr '\n' ' ')"
fi
[ "$step" = prepare ] && exit 0
set +e
.venv-lowest/bin/pytest -q -p no:cacheprovider -m "not rabbitmq and not rabbitmq_streams and not mqtt and not amqp10 and not nats and not spark and not slow" \
    tests/core tests/local "$@"
status=$?
set -e
[ "$status" -eq 5 ] && { echo "[lowest] no tests collected" >&2; exit 1; }
exit "$status"
