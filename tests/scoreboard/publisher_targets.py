"""Where the publisher rows run: per broker, a queue, how to restart the broker, and what its confirm survives.

Broker restarts are real: RabbitMQ ``rabbitmqctl stop_app`` / ``start_app``
(the shared broker; ``start_app`` always runs, in a ``finally``), a private
Mosquitto with persistence SIGKILLed and started again on its store, a
private nats-server with a JetStream file store SIGKILLed and started again.
The embedded broker lives inside its publisher's process: its "restart" is
that process being SIGKILLed (see :mod:`tests.scoreboard.publisher`).
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ackbridge.capabilities import Durability

#: How long the broker stays down in a restart (the fault's duration, not a wait for state).
OUTAGE_S = 2.0

#: The scoreboard stream's ack_wait (JetStream's default is 30 s).
NATS_ACK_WAIT_S = 5.0

#: Mosquitto saves its store on a timer (capabilities: "in memory until the next save"). Saving
#: after every change instead (autosave_on_changes true) rewrites the whole store each time: 15
#: msgs/s with ~900 queued (docs/brokers/mqtt.md), too slow to publish through.
MOSQUITTO_AUTOSAVE_S = 1
#: The consumer lags by hundreds while the row publishes at full speed: past max_queued_messages
#: (1000 by default) Mosquitto PUBACKs and drops, a loss the row is not about (docs/brokers/mqtt.md).
MOSQUITTO_DURABLE = f"autosave_interval {MOSQUITTO_AUTOSAVE_S}\nmax_queued_messages 100000\n"
#: Mosquitto 2.0 saves when ``last save + autosave_interval < now`` in whole seconds, so
#: ``autosave_interval 1`` saves every 2 s (measured on 2.0.11: store rewritten at +0.97, +2.97,
#: +4.97, +6.97 s). Not asserted (a property of the broker's timer); shown in the method text.
MOSQUITTO_SAVE_PERIOD_S = MOSQUITTO_AUTOSAVE_S + 1


Hook = Callable[[], None]


@dataclass
class Target:
    broker: str
    url: str
    options: dict[str, Any]
    #: consume() from here; publish to ``publish_to``.
    queue: str
    publish_to: str
    #: What a confirm has survived on this broker (from its capability table).
    durability: Durability
    #: restart(issuing, down): calls issuing() just before the stop/kill is issued and down() at the
    #: end of the outage, before the start (every confirm sent before the broker went is in by then,
    #: and none can come while it is down); keeps it down OUTAGE_S, starts it, returns once it listens.
    restart: Callable[[Hook, Hook], None] | None = None
    #: What restart() does, for the method text.
    restart_how: str = ""
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    #: Messages the broker still holds in the queue (ready + unacked), read broker-side; None: cannot tell.
    held: Callable[[], int] | None = None
    #: A broker that keeps confirmed messages in memory until its next save (LOSES_ON_KILL): when
    #: its store was last saved (time.time(), the store file's mtime), None if never. Read once the
    #: broker is dead; what it confirmed before that save must survive the kill.
    last_save: Callable[[], float | None] | None = None
    #: How often it saves (its timer), and how to freeze it (SIGSTOP: no confirm, no save) before
    #: the kill, where last_save is given.
    save_period_s: float | None = None
    freeze: Callable[[], None] | None = None

    def cleanup(self) -> None:
        for step in reversed(self.cleanups):
            try:
                step()
            except Exception as exc:  # cleanup must not hide the row
                print(f"cleanup of {self.broker}: {type(exc).__name__}: {exc}", flush=True)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=120, check=True)


def rabbit_restart(issuing: Hook, down: Hook) -> None:
    """``stop_app``, OUTAGE_S down, ``start_app``: the shared broker is always started again."""
    try:
        issuing()
        _rabbitmqctl("stop_app")
        time.sleep(OUTAGE_S)
        down()
    finally:
        _rabbitmqctl("start_app")
        _rabbitmqctl("await_startup")


def _rabbit(queue_type: str) -> Target:
    from ackbridge_rabbitmq.capabilities import CLASSIC, QUORUM
    from tests.rabbitmq.harness import RabbitHarness

    harness = RabbitHarness(queue_type)
    queue = harness.new_queue(dead_letter=False)
    caps = QUORUM if queue_type == "quorum" else CLASSIC
    return Target(f"rabbitmq-{queue_type}", harness.url(), harness.connect_options(), queue, queue,
                  caps.confirm_durability.level, rabbit_restart, "rabbitmqctl stop_app; 2 s; start_app",
                  [harness.cleanup], lambda: harness.ready(queue) + harness.unacked(queue))


def _amqp10() -> Target:
    from ackbridge_amqp10.capabilities import RABBITMQ
    from tests.amqp10.harness import Amqp10Harness

    harness = Amqp10Harness()
    address = harness.new_queue(dead_letter=False)
    return Target("amqp10-rabbitmq", harness.url(), harness.connect_options(), address,
                  harness.publish_target(address), RABBITMQ.confirm_durability.level, rabbit_restart,
                  "rabbitmqctl stop_app; 2 s; start_app", [harness.cleanup],
                  lambda: harness.ready(address) + harness.unacked(address))


def _mqtt() -> Target:
    from ackbridge_mqtt.capabilities import CAPABILITIES_V5
    from tests.failures.private_mosquitto import PrivateMosquitto

    broker = PrivateMosquitto(persistence=True, extra=MOSQUITTO_DURABLE)
    broker.start()

    def restart(issuing: Hook, down: Hook) -> None:
        issuing()
        broker.kill()
        time.sleep(OUTAGE_S)
        down()
        broker.start()

    def freeze() -> None:  # the kill (SIGKILL) follows; a stopped process dies of it as well
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGSTOP)

    store = broker.dir / "mosquitto.db"  # written to mosquitto.db.new and renamed: mtime = end of the save

    def last_save() -> float | None:
        try:
            return store.stat().st_mtime
        except FileNotFoundError:
            return None

    topic = f"abtest/pub/{uuid.uuid4().hex[:10]}"
    return Target("mqtt-5", broker.url(), {"protocol": "5", "reconnect_max_delay": 0.5}, topic, topic,
                  CAPABILITIES_V5.confirm_durability.level, restart,
                  "private Mosquitto (persistence true, autosave_interval 1) SIGSTOPped after a save, SIGKILLed; "
                  "2 s; started on its store",
                  [lambda: broker.__exit__(None, None, None)], last_save=last_save,
                  save_period_s=MOSQUITTO_SAVE_PERIOD_S, freeze=freeze)


def _nats() -> Target:
    from ackbridge_nats.capabilities import CAPABILITIES
    from tests.failures.private_nats import PrivateNats

    server = PrivateNats()
    server.start()
    subject = f"abtest.pub.{uuid.uuid4().hex[:10]}"
    # JetStream keeps a consumer's acks in memory and writes them later: after a SIGKILL the acks
    # since the last write are gone, those messages count against max_ack_pending (the consumer's
    # prefetch) and nothing more is delivered until ack_wait redelivers them. 5 s keeps the row short
    # (the plugin's ack_wait option sets it on the durable at subscribe).
    server.add_stream(subject, file_storage=True, ack_wait=NATS_ACK_WAIT_S)

    def restart(issuing: Hook, down: Hook) -> None:
        issuing()
        server.kill()
        time.sleep(OUTAGE_S)
        down()
        server.start()

    return Target("nats-jetstream", server.url(), {"reconnect_max_delay": 0.5, "ack_wait": NATS_ACK_WAIT_S},
                  subject, subject,
                  CAPABILITIES.confirm_durability.level, restart,
                  "private nats-server (JetStream file store) SIGKILLed; 2 s; started on its store",
                  [lambda: server.__exit__(None, None, None)], lambda: server.stream_messages(subject))


def _embedded() -> Target:
    from ackbridge_local.capabilities import CAPABILITIES
    from tests.local.harness import LocalHarness

    directory = Path(tempfile.mkdtemp(prefix="scoreboard-pub-"))
    harness = LocalHarness(directory)
    queue = harness.new_queue(dead_letter=False)

    def remove() -> None:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)

    return Target("embedded", harness.url(), {}, queue, queue, CAPABILITIES.confirm_durability.level, None,
                  "the publisher's process (the broker lives in it) SIGKILLed", [remove, harness.cleanup],
                  lambda: harness.ready(queue) + harness.unacked(queue))


def _streams() -> Target:
    from ackbridge_rabbitmq_streams.capabilities import CAPABILITIES
    from tests.rabbitmq_streams.harness import StreamsHarness

    harness = StreamsHarness()
    stream = harness.new_queue()
    # A named publisher: the broker recognises a retransmit of what it stored before the cut.
    options = {"reconnect_max_delay": 0.5, "publisher_name": f"scoreboard-{uuid.uuid4().hex[:8]}"}
    return Target("rabbitmq-streams", harness.url(), options, stream, stream, CAPABILITIES.confirm_durability.level,
                  None, "", [harness.cleanup], lambda: harness.ready(stream))


TARGETS: dict[str, Callable[[], Target]] = {
    "embedded": _embedded,
    "rabbitmq-classic": lambda: _rabbit("classic"),
    "rabbitmq-quorum": lambda: _rabbit("quorum"),
    "amqp10-rabbitmq": _amqp10,
    "mqtt-5": _mqtt,
    "nats-jetstream": _nats,
    "rabbitmq-streams": _streams,
}

#: Brokers whose restart fault cannot run here, and why (shown as a declared gap).
NO_RESTART = {
    "rabbitmq-streams": "RabbitMQ here is shared with other work running against it: the stream rows never "
                        "stop or restart it",
}

#: The restart fault's name per broker (the embedded broker restarts with its publisher's process).
RESTART_FAULT = {name: ("process-kill" if name == "embedded" else "broker-restart") for name in TARGETS}

#: Levels at which a broker may itself lose a confirm it gave when it is killed (its capability
#: table says so): only what it confirmed after its last save before the kill (``last_save``) is
#: counted in its own column; anything else confirmed and never delivered is LOST.
LOSES_ON_KILL = {Durability.UNTIL_NEXT_SAVE, Durability.IN_MEMORY}
