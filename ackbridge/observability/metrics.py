"""The instruments and the observers that record to them.

One :class:`ConnectionObserver` per connection, made once when it opens; it is
None when recording is off (see :mod:`ackbridge.observability._providers`), so
the per-message cost of "off" is one ``is not None`` check per recording point.
A :class:`SubscriptionObserver` (one per consumer) keeps its attribute sets
ready-made: recording is a dictionary-free ``add``/``record`` call.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from ackbridge.messages import ConfirmOutcome, ConfirmStatus, WireVerb
from ackbridge.observability import attributes as attr

_SCOPE = "ackbridge"


#: Counters: attribute and instrument name (``ackbridge.<name>``) -> (unit, description).
_COUNTERS = {
    "published": ("{message}", "Publishes by final outcome (ackbridge.outcome)"),
    "retransmissions": ("{message}", "Publishes sent again (retransmit=True)"),
    "received": ("{message}", "Deliveries handed to the consumer's ledger"),
    "redeliveries": ("{message}", "Deliveries the broker marked redelivered"),
    "settled": ("{message}", "Settlements by verb (messaging.operation.name)"),
    "stale_refused": ("{settlement}", "Settlements refused because their connection generation had ended"),
    "reconnects": ("{generation}", "Connection generations ended (each one a reconnect)"),
    "labelled_acks": ("{ack}", "Labelled acknowledgements received, by label and status"),
    "drained": ("{message}", "Deliveries a consumer's drain() finished, handed back or abandoned (ackbridge.outcome)"),
    "leases_extended": ("{delivery}", "Leases (ack deadlines) extended by delivery.extend()"),
    "leases_lapsed": ("{delivery}", "Deliveries sent again while an earlier delivery was held (deadline passed)"),
    "inbox_duplicates": ("{message}", "Deliveries a transactional inbox already held: acked, handler not run"),
    "relay_outcomes": ("{message}", "Outbox rows a relay published, by outcome (ackbridge.outcome)"),
    "pipeline_attempts": ("{run}", "Handler runs under the pipeline, by attempt number (ackbridge.attempt)"),
    "retries_scheduled": ("{message}", "Failed deliveries copied to a delay queue (ackbridge.level)"),
    "dead_lettered": ("{message}", "Messages the redelivery policy dead-lettered or dropped, by reason (error.type)"),
    "circuit_changes": ("{change}", "Circuit breaker state changes, by new state (ackbridge.circuit)"),
}
#: Bucket boundaries (seconds) of every duration histogram: 0.5 ms to 10 minutes. A
#: confirm or a settlement takes from well under a millisecond (an in-process broker)
#: to minutes (a slow handler, a broker holding confirms under a memory alarm).
#: OpenTelemetry's default boundaries (0, 5, 10 ... 10000) are for milliseconds: in
#: seconds every sub-second sample would land in the first bucket. Sent as the
#: instrument's advice, so a View the application configures still wins.
DURATION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                      1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Histograms: attribute -> (unit, description); the instrument is ``ackbridge.<a.b>``.
_HISTOGRAMS = {
    "confirm_duration": ("s", "From sending a publish to the broker's answer"),
    "settle_duration": ("s", "From a delivery's arrival to its settlement"),
}


class Instruments:
    """Every ackbridge instrument on one meter provider (made once per provider)."""

    published: Any
    retransmissions: Any
    received: Any
    redeliveries: Any
    settled: Any
    stale_refused: Any
    reconnects: Any
    labelled_acks: Any
    drained: Any
    leases_extended: Any
    leases_lapsed: Any
    inbox_duplicates: Any
    relay_outcomes: Any
    pipeline_attempts: Any
    retries_scheduled: Any
    dead_lettered: Any
    circuit_changes: Any
    confirm_duration: Any
    settle_duration: Any

    def __init__(self, provider: Any) -> None:
        from opentelemetry.metrics import Observation

        from ackbridge import __version__

        self._observation = Observation
        meter = provider.get_meter(_SCOPE, __version__)
        for name, (unit, description) in _COUNTERS.items():
            setattr(self, name, meter.create_counter(f"ackbridge.{name}", unit, description))
        for name, (unit, description) in _HISTOGRAMS.items():
            setattr(self, name, meter.create_histogram(f"ackbridge.{name.replace('_', '.')}", unit, description,
                                                       explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S))
        #: Live connection observers, read by the gauges' callbacks.
        self.live: weakref.WeakSet[ConnectionObserver] = weakref.WeakSet()
        meter.create_observable_gauge("ackbridge.unsettled", [self._unsettled], "{message}",
                                      "Deliveries received and not settled on the wire yet")
        meter.create_observable_gauge("ackbridge.unconfirmed", [self._unconfirmed], "{message}",
                                      "Publishes without an outcome yet")
        #: Live inboxes and relays (ackbridge.transactional): each tells its last readings.
        self.transactional: weakref.WeakSet[Any] = weakref.WeakSet()
        for gauge, unit, description in _TRANSACTIONAL_GAUGES:
            meter.create_observable_gauge(f"ackbridge.{gauge}", [self._reading(gauge)], unit, description)

    def _reading(self, gauge: str) -> Any:
        def read(_options: Any) -> Iterable[Any]:
            return [self._observation(value, attributes) for source in list(self.transactional)
                    for name, value, attributes in source.readings() if name == gauge]
        return read

    def _unsettled(self, _options: Any) -> Iterable[Any]:
        return [self._observation(value, attributes) for observer in list(self.live)
                for value, attributes in observer.unsettled()]

    def _unconfirmed(self, _options: Any) -> Iterable[Any]:
        return [self._observation(value, attributes) for observer in list(self.live)
                for value, attributes in observer.unconfirmed()]


_instruments: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
#: The transactional gauges, read at the last commit or relay round (never a query from the reader's thread).
_TRANSACTIONAL_GAUGES = (
    ("inbox.size", "{message}", "Ids a transactional inbox holds (after its last pruning)"),
    ("outbox.backlog", "{message}", "Outbox rows not yet confirmed by the broker"),
    ("outbox.age", "s", "Age of the oldest outbox row not yet confirmed"),
)


def instruments_for(provider: Any) -> Instruments:
    found = _instruments.get(provider)
    if found is None:
        found = _instruments[provider] = Instruments(provider)
    return found


def instruments_in_use() -> Instruments | None:
    """The instruments of the meter provider in use now, or None (recording off);
    for recorders without a connection (the transactional inbox and relay)."""
    from ackbridge.observability._providers import meter_provider

    provider = meter_provider()
    return instruments_for(provider) if provider is not None else None


class ConnectionObserver:
    """What one connection records: publishes, reconnects, labelled acks, and
    the gauges' readings of its consumers and publishers."""

    def __init__(self, base: dict[str, Any], instruments: Instruments | None, tracer: Any) -> None:
        self.base = base
        self.instruments = instruments
        self.tracer = tracer
        self._send_attrs: dict[str, dict[str, Any]] = {}
        self._outcome_attrs: dict[tuple[str, ConfirmStatus], dict[str, Any]] = {}
        self._consumers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._publishers: weakref.WeakSet[Any] = weakref.WeakSet()
        if instruments is not None:
            instruments.live.add(self)

    # ---- publishing ------------------------------------------------------------
    def send_attributes(self, destination: str) -> dict[str, Any]:
        found = self._send_attrs.get(destination)
        if found is None:
            found = self._send_attrs[destination] = {
                **self.base, attr.DESTINATION: destination, attr.OPERATION_TYPE: "send",
                attr.OPERATION_NAME: "publish"}
        return found

    def track_publisher(self, publisher: Any) -> None:
        self._publishers.add(publisher)

    def published(self, destination: str, outcome: ConfirmOutcome, sent_at: float | None) -> None:
        """A publish's final outcome; *sent_at* (monotonic) when the broker answered it."""
        instruments = self.instruments
        if instruments is None:
            return
        key = (destination, outcome.status)
        attributes = self._outcome_attrs.get(key)
        if attributes is None:
            attributes = self._outcome_attrs[key] = {**self.send_attributes(destination),
                                                     attr.OUTCOME: outcome.status.value}
        instruments.published.add(1, attributes)
        if sent_at is not None:
            instruments.confirm_duration.record(time.monotonic() - sent_at, attributes)

    def retransmitted(self, destination: str) -> None:
        if self.instruments is not None:
            self.instruments.retransmissions.add(1, self.send_attributes(destination))

    # ---- connection ------------------------------------------------------------
    def generation_ended(self, generation: int) -> None:
        if self.instruments is not None:
            self.instruments.reconnects.add(1, self.base)

    def labelled_ack(self, label: str, status: int) -> None:
        if self.instruments is not None:
            self.instruments.labelled_acks.add(1, {**self.base, attr.ACK_LABEL: label, attr.ACK_STATUS: status})

    # ---- draining and leases (ackbridge.engine.draining, ackbridge.engine.leases) ----------
    def drained(self, source: str, finished: int, handed_back: int, abandoned: int) -> None:
        if self.instruments is None:
            return
        for outcome, count in (("finished", finished), ("handed_back", handed_back), ("abandoned", abandoned)):
            if count:
                self.instruments.drained.add(count, {**self.base, attr.DESTINATION: source, attr.OUTCOME: outcome})

    def lease(self, source: str, *, lapsed: bool) -> None:
        """A lease extended (``delivery.extend()``), or one that lapsed (the broker sent the message again)."""
        if self.instruments is not None:
            counter = self.instruments.leases_lapsed if lapsed else self.instruments.leases_extended
            counter.add(1, {**self.base, attr.DESTINATION: source})

    # ---- consuming -------------------------------------------------------------
    def subscription(self, source: str) -> SubscriptionObserver:
        return SubscriptionObserver(self, source)

    def track_consumer(self, consumer: Any) -> None:
        self._consumers.add(consumer)

    # ---- gauges ----------------------------------------------------------------
    def unsettled(self) -> Iterator[tuple[int, dict[str, Any]]]:
        totals: dict[str, int] = {}
        for consumer in list(self._consumers):
            if not consumer._closed:
                totals[consumer.source] = totals.get(consumer.source, 0) + consumer.unsettled
        for source, value in totals.items():
            yield value, {**self.base, attr.DESTINATION: source}

    def unconfirmed(self) -> Iterator[tuple[int, dict[str, Any]]]:
        yield sum(p.in_flight for p in list(self._publishers)), self.base


_SETTLE_NAMES = {WireVerb.ACK: "ack", WireVerb.REQUEUE: "requeue", WireVerb.REJECT: "reject"}


class SubscriptionObserver:
    """What one consumer's ledger records: receipts, settlements, stale refusals."""

    __slots__ = ("_instruments", "_receive", "_settle", "_tracer", "connection", "stale_attrs")

    def __init__(self, connection: ConnectionObserver, source: str) -> None:
        self.connection = connection
        self._instruments = connection.instruments
        self._tracer = connection.tracer
        base = {**connection.base, attr.DESTINATION: source}
        self._receive = {**base, attr.OPERATION_TYPE: "receive", attr.OPERATION_NAME: "receive"}
        self._settle = {name: {**base, attr.OPERATION_TYPE: "settle", attr.OPERATION_NAME: name}
                        for name in (*_SETTLE_NAMES.values(), attr.DEAD_LETTER)}
        self.stale_attrs = {**base, attr.OPERATION_TYPE: "settle"}

    def received(self, record: Any) -> None:
        """A delivery entered the ledger: count it, note its arrival time."""
        record.received_at = time.monotonic()
        instruments = self._instruments
        if instruments is None:
            return
        instruments.received.add(1, self._receive)
        message = record.message
        if message.redelivered or (message.delivery_count or 1) > 1:
            instruments.redeliveries.add(1, self._receive)

    def settled(self, record: Any, verb: WireVerb, *, by_policy: bool = False) -> None:
        name = attr.DEAD_LETTER if by_policy else _SETTLE_NAMES[verb]
        attributes = self._settle[name]
        instruments = self._instruments
        if instruments is not None:
            instruments.settled.add(1, attributes)
            if record.received_at:
                instruments.settle_duration.record(time.monotonic() - record.received_at, attributes)
        if self._tracer is not None:
            from ackbridge.observability.tracing import record_settle

            record_settle(self._tracer, f"settle {attributes[attr.DESTINATION]}",
                          {**attributes, attr.MESSAGE_ID: record.message.message_id or "",
                           attr.GENERATION: record.message.generation},
                          record.message.headers, record.received_at)

    def stale(self) -> None:
        if self._instruments is not None:
            self._instruments.stale_refused.add(1, self.stale_attrs)
