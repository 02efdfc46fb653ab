"""``ackbridge dead-letters peek|replay``: look at a queue's dead-letter companion and move
its messages back (docs/dead-letters.md).

``peek`` takes up to N messages without settling them and closes its consumer, which
hands every one back to the broker (the same path as a drained consumer: never acked,
never dead-lettered). ``replay`` publishes each message to its original queue, waits
for the confirm, and acks the dead-letter copy only when the confirm says confirmed;
anything else leaves the copy where it was. An interruption between a confirm and its
ack leaves at worst a duplicate (the copy is replayed again next time), never a loss.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ackbridge.capabilities import Topology
from ackbridge.cli.output import console, emit_json, fail, summary, warn
from ackbridge.connect import connect
from ackbridge.errors import AckbridgeError, BrokerError
from ackbridge.messages import ConfirmStatus
from ackbridge.pipeline import headers as h
from ackbridge.pipeline.names import dead_letter_queue
from ackbridge.sync.connection import Connection
from ackbridge.sync.consumer import Delivery
from ackbridge.urls import redact

log = logging.getLogger("ackbridge.cli")

COMMANDS = ("dead-letters",)
URL_HELP = "broker URL (default: $ACKBRIDGE_URL)"
UrlArg = Annotated[str, typer.Argument(help=URL_HELP, envvar="ACKBRIDGE_URL", show_envvar=True, metavar="URL")]
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help="the queue whose dead letters these are")]
DlqOpt = Annotated[str | None, typer.Option("--dead-letter-queue", help="read this queue instead of the "
                                                                        "companion the broker names")]
IdleOpt = Annotated[float, typer.Option(help="stop after this many seconds without a message", min=0.1)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]

#: What peeking does to the broker's delivery counts (by ``Capabilities.broker``).
PEEK_EFFECT = {
    "rabbitmq": "the messages go back when the peek's channel closes, in their places; the next delivery is "
                "marked redelivered; a quorum queue's x-delivery-count goes up by one (it counts toward "
                "delivery_limit), a classic queue counts nothing",
    "embedded": "each message's delivery_count goes up by one (its lease is released when the peek closes)",
    "nats-jetstream": "each message is -NAKed when the peek closes: its num_delivered goes up by one (it counts "
                      "toward the dead-letter consumer's max_deliver, unlimited by default)",
}
UNKNOWN_EFFECT = "the messages go back to the broker unsettled when the peek closes; how it counts that delivery " \
                 "is the broker's (see docs/dead-letters.md)"

#: RabbitMQ's own dead-lettering headers (no ackbridge reason: the broker writes these).
_RABBIT_FIRST = ("x-first-death-queue", "x-first-death-reason", "x-first-death-exchange")
#: The headers the NATS and MQTT plugins put on a copy ``reject()`` dead-letters, lower-cased.
_PLUGIN_MARKS = ("ackbridge-dead-lettered-from", "ackbridge-dead-letter-deliveries",
                 "ackbridge-dead-letter-sequence", "ackbridge-original-message-id")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return h.timestamp(value.timestamp())
    return str(value)


def broker_death(headers: Mapping[str, Any]) -> dict[str, str]:
    """What a broker's (or a plugin's) own dead-lettering wrote on a message that
    ``reject()`` sent to the dead-letter queue, without the policy's reasons: RabbitMQ's
    ``x-death`` (the latest entry) and ``x-first-death-*``; the NATS and MQTT plugins'
    ``ackbridge-dead-lettered-from`` and delivery count. Empty when there is none."""
    found: dict[str, str] = {}
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], Mapping):
        latest = deaths[0]
        for key in ("queue", "reason", "count", "time", "exchange"):
            if key in latest:
                found[f"x-death.{key}"] = _text(latest[key])
    for key in _RABBIT_FIRST:
        if key in headers:
            found[key] = _text(headers[key])
    lowered = {str(k).lower(): v for k, v in headers.items()}
    for key in _PLUGIN_MARKS:
        if key in lowered:
            found[key] = _text(lowered[key])
    return found


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message as ``peek`` shows it."""

    message_id: str | None
    size: int
    redelivered: bool
    delivery_count: int | None
    #: The documented header set (docs/failure-policy.md), where the policy wrote it.
    reasons: dict[str, str]
    #: What the broker's own dead-lettering says (see :func:`broker_death`).
    broker: dict[str, str]

    @classmethod
    def of(cls, delivery: Delivery) -> DeadLetter:
        headers = delivery.headers
        reasons = {name: _text(headers[name]) for name in h.ALL if name in headers}
        return cls(delivery.message_id, len(delivery.body), delivery.redelivered, delivery.delivery_count,
                   reasons, broker_death(headers))

    def as_json(self) -> dict[str, Any]:
        return {"id": self.message_id, "size": self.size, "redelivered": self.redelivered,
                "delivery_count": self.delivery_count, "headers": self.reasons, "broker": self.broker}


def companion(conn: Connection, queue: str, named: str | None) -> str:
    """The dead-letter queue of *queue*: *named*, else the companion ``inspect_queue``
    names, else the policy's default ``QUEUE.dlq``."""
    if named:
        return named
    if conn.capabilities.topology_support(Topology.INSPECT_QUEUE).available:
        try:
            found = conn.inspect_queue(queue).dead_letter
        except BrokerError as exc:
            warn(f"could not inspect {queue!r} ({exc}); trying {dead_letter_queue(queue)!r}")
            found = None
        if found:
            return found
    return dead_letter_queue(queue)


def held(conn: Connection, queue: str, dlq: str) -> int | None:
    """Messages the dead-letter queue holds for its consumers, where the broker tells:
    its own count (JetStream: its durable's pending, as the stream keeps what was acked),
    else the count its queue gives for its companion."""
    if not conn.capabilities.topology_support(Topology.INSPECT_QUEUE).available:
        return None
    try:
        own = conn.inspect_queue(dlq)
        if own.messages is not None:
            return own.messages + (own.unacked or 0)
    except AckbridgeError:
        pass  # JetStream: no durable on it until something consumed it
    try:
        info = conn.inspect_queue(queue)
    except AckbridgeError:
        return None
    return info.dead_lettered if info.dead_letter == dlq else None


class _NotRejectingHere(logging.Filter):
    """Drops consume()'s warning that the dead-letter queue has no dead-letter target of
    its own: these commands never reject from it, so the warning would only mislead."""

    def __init__(self, dlq: str) -> None:
        super().__init__()
        self.dlq = dlq

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (isinstance(record.msg, str) and record.msg.startswith("ackbridge: %r has no dead-letter target")
                    and len(args) > 0 and args[0] == self.dlq)


@contextlib.contextmanager
def quiet_about(dlq: str) -> Iterator[None]:
    quiet = _NotRejectingHere(dlq)
    logging.getLogger("ackbridge").addFilter(quiet)
    try:
        yield
    finally:
        logging.getLogger("ackbridge").removeFilter(quiet)


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False, disable=quiet)


def peek(
    url: UrlArg,
    queue: QueueOpt = "ackbridge",
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="messages to show at most")] = 10,
    dead_letter: DlqOpt = None,
    idle: IdleOpt = 2.0,
    as_json: JsonOpt = False,
) -> None:
    """Show up to N messages of QUEUE's dead-letter queue without removing them: their
    id, the documented reason headers, and what the broker's own dead-lettering wrote
    (RabbitMQ x-death). They are taken unsettled and handed back when the peek closes;
    the broker may count that as a delivery (see docs/dead-letters.md)."""
    shown: list[DeadLetter] = []
    try:
        with connect(url) as conn:
            dlq = companion(conn, queue, dead_letter)
            effect = PEEK_EFFECT.get(conn.capabilities.broker, UNKNOWN_EFFECT)
            # prefetch = N: the broker hands out no more than are shown, so nothing else is touched.
            with quiet_about(dlq), conn.consume(dlq, prefetch=count) as consumer:
                while len(shown) < count:
                    delivery = consumer.get(timeout=idle)
                    if delivery is None:
                        break
                    shown.append(DeadLetter.of(delivery))
                # Leaving the block closes the consumer: every delivery, unsettled, goes back.
            log.info("ackbridge.cli: peeked at %d message(s) of %r (handed back unsettled)", len(shown), dlq)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    if as_json:
        emit_json({"queue": queue, "dead_letter_queue": dlq, "shown": len(shown), "peek_effect": effect,
                   "messages": [d.as_json() for d in shown]})
        return
    console.print(f"[bold]{len(shown)} message(s) in {escape(dlq)!s}[/bold] (left there)")
    for d in shown:
        table = Table(title=escape(f"{d.message_id}  ({d.size} bytes, delivery count {d.delivery_count})"),
                      title_justify="left", show_header=False)
        table.add_column("header", no_wrap=True)
        table.add_column("value")
        for name, value in {**d.reasons, **d.broker}.items():
            table.add_row(escape(name), escape(redact(value)))
        if not d.reasons and not d.broker:
            table.add_row("(none)", "no reason headers: dead-lettered by a broker or client that writes none")
        console.print(table)
    console.print(f"peek: {escape(effect)}")


@dataclass
class Replayed:
    """What ``replay`` did."""

    replayed: int = 0
    left: int = 0
    #: (destination, status: reason) of every copy left in the dead-letter queue.
    why: Counter[tuple[str, str]] = field(default_factory=Counter)
    to: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False


#: Not carried by a replayed message: the attempt count and due time (a pipeline gives it a
#: fresh set of attempts rather than dead-lettering it at its first failure), what a broker's
#: own dead-lettering wrote (RabbitMQ writes x-death again if it dies again), and the first
#: id: the replayed message's own id (``m~dead``) is what its next copies are named after.
#: Carried, the first id named its next dead-letter copy ``m~dead`` again, which JetStream
#: drops as a duplicate within its duplicate_window while confirming it: a loss
#: (tests/cli_dead_letters: test_a_replayed_message_that_fails_again_is_dead_lettered_again).
_NOT_REPLAYED = frozenset((h.ATTEMPT, h.RETRY_DUE, h.ORIGINAL_ID, "x-death", *_RABBIT_FIRST, "x-last-death-queue",
                           "x-last-death-reason", "x-last-death-exchange"))
_SCALARS = (str, bytes, int, float, bool, type(None))


def replay_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """The headers a replayed message carries: the application's and the failure history
    (original queue, id, failure times and reason), without :data:`_NOT_REPLAYED` and
    without values ackbridge cannot publish (a table or list another client wrote)."""
    kept = {k: v for k, v in headers.items() if k not in _NOT_REPLAYED and isinstance(v, _SCALARS)}
    if len(kept) + sum(k in headers for k in _NOT_REPLAYED) < len(headers):
        log.warning("ackbridge.cli: a replayed message loses header(s) %s (not str, bytes, int, float or bool)",
                    sorted(k for k in headers if k not in kept and k not in _NOT_REPLAYED))
    return kept


def original_queue(headers: Mapping[str, Any], queue: str) -> str:
    """Where a dead letter goes back to: the policy's ``ackbridge-original-queue``, else
    the queue the broker's own dead-lettering names (RabbitMQ ``x-death``), else *queue*."""
    target = headers.get(h.ORIGINAL_QUEUE)
    if isinstance(target, str) and target:
        return target
    death = broker_death(headers)
    return death.get("x-death.queue") or death.get("x-first-death-queue") or queue


def replay_one(conn: Connection, delivery: Delivery, queue: str, confirm_wait: float, done: Replayed) -> None:
    """Publish *delivery* to its original queue, confirmed, then ack it; else leave it
    unsettled (the consumer's close hands it back to the dead-letter queue)."""
    back = original_queue(delivery.headers, queue)
    try:
        confirm = conn.publish(back, delivery.body, headers=replay_headers(delivery.headers),
                               message_id=delivery.message_id)
        outcome = confirm.result(confirm_wait)
        status, reason = outcome.status, outcome.reason
    except TimeoutError:
        status, reason = ConfirmStatus.UNKNOWN, f"no confirm within {confirm_wait:g} s"
    except AckbridgeError as exc:
        status, reason = ConfirmStatus.UNKNOWN, f"{type(exc).__name__}: {exc}"
    if status is ConfirmStatus.CONFIRMED:
        # Only now: the broker holds the replayed message. Interrupted here, the copy
        # stays too (a duplicate on the next replay), never lost.
        delivery.ack()
        done.replayed += 1
        done.to[back] += 1
        return
    done.left += 1
    done.why[(back, f"{status.value}: {redact(reason or '(no reason given)')}")] += 1
    log.error("ackbridge.cli: replaying %r to %r was %s (%s); it stays in the dead-letter queue",
              delivery.message_id, back, status.value, redact(reason or ""))


def replay(
    url: UrlArg,
    queue: QueueOpt = "ackbridge",
    count: Annotated[int | None, typer.Option("-n", "--count", min=1, help="messages to move at most "
                                                                           "(default: all)")] = None,
    dead_letter: DlqOpt = None,
    idle: IdleOpt = 2.0,
    prefetch: Annotated[int, typer.Option(min=1, help="dead letters taken ahead of their replay")] = 50,
    confirm_wait: Annotated[float, typer.Option(help="seconds to wait for each confirm", min=0.1)] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Move dead-lettered messages back to their original queue (the
    ackbridge-original-queue header, else QUEUE): each is published with a confirm, and
    its dead-letter copy is acked only once the confirm says confirmed. A refused or
    unknown confirm leaves the copy in the dead-letter queue (counted, with the reason;
    exit 1). Interrupted (Ctrl-C) between a confirm and its ack, a message can be in
    both queues: replaying again then makes a duplicate, never a loss."""
    done = Replayed()
    try:
        with connect(url) as conn:
            dlq = companion(conn, queue, dead_letter)
            before = held(conn, queue, dlq)
            total = count if before is None else min(before, count or before)
            window = min(prefetch, count or prefetch)
            with _progress(as_json) as progress, quiet_about(dlq), conn.consume(dlq, prefetch=window) as c:
                task = progress.add_task(f"replaying {dlq}", total=total)
                try:
                    while count is None or done.replayed + done.left < count:
                        # A copy left unsettled holds one prefetch slot: it is not handed out again.
                        delivery = c.get(timeout=idle)
                        if delivery is None:
                            break
                        replay_one(conn, delivery, queue, confirm_wait, done)
                        progress.advance(task, 1)
                except KeyboardInterrupt:
                    # What is not acked goes back with the consumer's close; the summary still prints.
                    done.interrupted = True
            log.info("ackbridge.cli: replayed %d message(s) of %r, %d left", done.replayed, dlq, done.left)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    why = [{"to": to, "why": text, "count": n} for (to, text), n in done.why.most_common()]
    if as_json:
        emit_json({"queue": queue, "dead_letter_queue": dlq, "replayed": done.replayed, "left": done.left,
                   "to": dict(done.to), "why": why, "interrupted": done.interrupted})
    else:
        title = f"replay of {dlq!r}" + (" (interrupted)" if done.interrupted else "")
        summary({"replayed": done.replayed, "left in the dead-letter queue": done.left}, title)
        for row in why:
            console.print(f"left {row['count']} (to {escape(str(row['to']))}): {escape(str(row['why']))}")
    if done.left or done.interrupted:
        raise typer.Exit(1)


def add_commands(app: typer.Typer) -> None:
    """Register ``dead-letters peek|replay`` on *app*."""
    group = typer.Typer(help="Show a queue's dead letters and move them back.", no_args_is_help=True,
                        rich_markup_mode=None)
    group.command("peek")(peek)
    group.command("replay")(replay)
    app.add_typer(group, name="dead-letters")
