#!/usr/bin/env bash
# Make sure RabbitMQ (with management, AMQP 1.0 and stream plugins), Mosquitto, NATS (JetStream) and
# PostgreSQL (ackbridge.transactional's tests: trust auth, database `test`) run on loopback.
# Installs them from Debian's packages when missing. Safe to run repeatedly.
set -euo pipefail
need_apt=()
command -v rabbitmq-server >/dev/null 2>&1 || need_apt+=(rabbitmq-server)
command -v mosquitto >/dev/null 2>&1 || need_apt+=(mosquitto)
[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || need_apt+=(nats-server)
ls /etc/postgresql/*/main >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "[brokers] installing ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
    for _ in $(seq 1 120); do port_open "$1" && return 0; sleep 0.5; done
    echo "[brokers] nothing listens on 127.0.0.1:$1" >&2; return 1
}
if ! port_open 5672; then
    echo "[brokers] starting RabbitMQ"
    rabbitmq-server -detached
    wait_port 5672
fi
rabbitmqctl await_startup >/dev/null 2>&1 || true
enabled=$(rabbitmq-plugins list -e -m 2>/dev/null || true)
if ! grep -q rabbitmq_management <<<"$enabled" || ! grep -q rabbitmq_amqp1_0 <<<"$enabled" \
    || ! grep -qx rabbitmq_stream <<<"$enabled"; then
    # Enabling is online (no restart): other work may be using the broker meanwhile.
    echo "[brokers] enabling RabbitMQ management, AMQP 1.0 and stream plugins"
    rabbitmq-plugins enable rabbitmq_management rabbitmq_amqp1_0 rabbitmq_stream >/dev/null
fi
wait_port 15672
wait_port 5552
# Quorum queues publish their counters once per tick (5 s by default), so a test that waits
# for a count waits up to a tick; 500 ms makes quorum tests as quick as classic ones. Runtime
# only (no restart); queues declared from now on use it. See docs/broker-quirks.md.
rabbitmqctl eval 'application:set_env(rabbit, quorum_tick_interval, 500).' >/dev/null
if ! port_open 1883; then
    echo "[brokers] starting Mosquitto"
    mkdir -p /run/mosquitto && chown mosquitto /run/mosquitto 2>/dev/null || true
    mosquitto -d -c /etc/mosquitto/mosquitto.conf
    wait_port 1883
fi
if ! port_open 4222; then
    echo "[brokers] starting NATS with JetStream"
    mkdir -p /var/lib/nats-server
    nats=$(command -v nats-server || echo /usr/sbin/nats-server)
    start-stop-daemon --start --oknodo --background --exec "$nats" -- \
        -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
    wait_port 4222
fi
if ! port_open 5432; then
    echo "[brokers] starting PostgreSQL"
    version=$(ls /etc/postgresql | sort -V | tail -1)
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
    wait_port 5432
fi
# The tests connect as user postgres to database `test` over TCP without a password (trust).
if ! psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null 2>&1; then
    echo "[brokers] PostgreSQL: trusting loopback and creating database test"
    hba=$(ls /etc/postgresql/*/main/pg_hba.conf | sort -V | tail -1)
    grep -q "^host all all 127.0.0.1/32 trust" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    su postgres -c "psql -Atc 'select pg_reload_conf()'" >/dev/null
    su postgres -c "createdb test" 2>/dev/null || true
fi
echo "[brokers] RabbitMQ 127.0.0.1:5672 (management :15672, streams :5552), Mosquitto 127.0.0.1:1883, NATS 127.0.0.1:4222 and PostgreSQL 127.0.0.1:5432 are up"
