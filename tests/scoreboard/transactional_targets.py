"""Where the transactional rows run: per broker, a queue, the options its consumers use, how
consumers can share it, and what the broker holds of it (read broker-side, never from the client
under test).

How two consumer processes share a queue differs by broker, and each row says which it had:

* ``compete``: both consume the queue at once and the broker hands each message to one of them
  (RabbitMQ classic / quorum, AMQP 1.0, the embedded broker, a JetStream durable pull consumer);
* ``turns`` (MQTT 5): a queue is a topic plus ONE persistent session, and a second connection on
  that session takes it over (Mosquitto disconnects the first). The two processes take turns on
  the session, each killed twice; the session carries what was in flight from one to the next.
  MQTT 5 shared subscriptions (``$share/...``) are not served by the plugin;
* ``readers`` (RabbitMQ streams): a log is read, not taken. Each process reads the whole stream
  under its own reference (its stored offset); both apply every id through one inbox, so the
  database is what makes the effects once. The end state is each reference's stored offset at
  the last record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ackbridge.testing import BrokerHarness
from tests.scoreboard.brokers import BROKERS

#: JetStream redelivers what a killed process held after ack_wait (its default is 30 s).
NATS_ACK_WAIT_S = 2.0


@dataclass
class GridTarget:
    broker: str
    harness: BrokerHarness
    queue: str
    #: Where to publish so that messages land in ``queue`` (AMQP 1.0: an address of its own).
    publish_to: str
    #: Connect options of every client in the row (what ``harness.connect_options()`` gives, and more).
    options: dict[str, Any]
    sharing: str  # "compete" | "turns" | "readers"
    #: Per consumer seat, options of its own (streams: a reference each).
    seat_options: list[dict[str, Any]] = field(default_factory=lambda: [{}, {}])
    #: Whether the broker keeps both copies of a retransmitted publish (JetStream drops a second
    #: publish of a Nats-Msg-Id within its duplicate window).
    stores_copies: bool = True

    def url(self) -> str:
        return self.harness.url()

    def stored(self) -> int:
        """Messages the broker holds in the queue before anyone consumed it."""
        if self.sharing == "readers":
            return len(self._records())
        return self.harness.ready(self.queue)

    def left(self, seats: int = 2) -> tuple[int, str]:
        """What the broker still holds for the consumers (0 = done), and how it reads."""
        if self.sharing == "readers":
            records = self._records()
            last = records[-1][0] if records else -1
            parts, unread = [], 0
            for options in self.seat_options[:seats]:
                offset = self._admin().broker_offset(self.queue, options["reference"])
                unread += sum(1 for at, _ in records if offset is None or at > offset)
                parts.append(f"{options['reference']}@{offset}")
            return unread, f"{unread} unread (stored offsets {', '.join(parts)}; last record {last})"
        ready, unacked = self.harness.ready(self.queue), self.harness.unacked(self.queue)
        return ready + unacked, f"{ready} ready, {unacked} unacked"

    def refusal(self) -> tuple[str, bytes] | None:
        """A (destination, body) the broker refuses, or None where it refuses nothing."""
        target = self.harness.unroutable_target()
        if target is not None:
            return target, b"refuse me"
        body = self.harness.oversized_body()
        return (self.publish_to, body) if body is not None else None

    def _admin(self) -> Any:
        return self.harness.admin  # type: ignore[attr-defined]

    def _records(self) -> list[tuple[int, bytes]]:
        return list(self._admin().records(self.queue))

    def cleanup(self) -> None:
        self.harness.cleanup()


def _entry(name: str) -> Callable[[], BrokerHarness]:
    return next(entry.make for entry in BROKERS if entry.name == name)


def make_target(broker: str, *, readers: tuple[str, ...] = ("abtx-a", "abtx-b")) -> GridTarget:
    harness = _entry(broker)()
    try:
        queue = harness.new_queue(dead_letter=False)
        options = dict(harness.connect_options())
        sharing, copies = "compete", True
        seat_options: list[dict[str, Any]] = [{}, {}]
        if broker == "nats-jetstream":
            options["ack_wait"] = NATS_ACK_WAIT_S
            copies = False
        elif broker == "mqtt-5":
            sharing = "turns"
        elif broker == "rabbitmq-streams":
            sharing, seat_options = "readers", [{"reference": reference} for reference in readers]
        return GridTarget(broker, harness, queue, harness.publish_target(queue), options, sharing, seat_options,
                          copies)
    except BaseException:
        harness.cleanup()
        raise


#: The brokers of the grid, in the table's order (MQTT 3.1.1 carries no message id: the inbox
#: refuses every delivery there, docs/transactional.md).
GRID_BROKERS = ("embedded", "rabbitmq-classic", "rabbitmq-quorum", "amqp10-rabbitmq", "mqtt-5", "nats-jetstream",
                "rabbitmq-streams")
