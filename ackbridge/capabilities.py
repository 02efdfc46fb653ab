"""What each broker adapter can do, declared as plain data.

Every adapter declares, per uniform verb, whether the broker does it natively,
whether ackbridge emulates it (and how), or whether it cannot be done. The core
consults this table before sending anything: an unsupported verb raises
:class:`~ackbridge.errors.UnsupportedVerbError` instead of silently doing
something else.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ackbridge.errors import UnsupportedVerbError


class Verb(enum.StrEnum):
    """The uniform settlement and publishing verbs every plugin declares."""

    ACK = "ack"
    REQUEUE = "requeue"
    REJECT = "reject"
    CUMULATIVE_ACK = "cumulative ack"
    CONFIRM = "confirm"
    CONFIRM_REFUSED = "confirm refused"
    DELIVERY_COUNT = "delivery count"
    LABELLED_ACKS = "labelled acks"


class Topology(enum.StrEnum):
    """Verbs that manage what the broker holds (queues, sessions), not messages.

    A plugin declares those it offers in :attr:`Capabilities.topology`; one it
    leaves out is unsupported, so a plugin written before these verbs existed
    still loads (and refuses them clearly).
    """

    DECLARE_QUEUE = "declare queue"
    DELETE_QUEUE = "delete queue"
    PURGE_QUEUE = "purge queue"
    INSPECT_QUEUE = "inspect queue"


class Level(enum.StrEnum):
    """How a broker does a verb."""

    NATIVE = "native"
    EMULATED = "emulated"
    UNSUPPORTED = "unsupported"


class RetryMethod(enum.StrEnum):
    """How :mod:`ackbridge.pipeline` waits out a back-off on a broker that allows a delayed retry."""

    #: A confirmed copy waits in a delay queue per back-off level and is moved back when
    #: due: the attempt count travels in the copy's headers and outlives the consumer.
    DELAY_QUEUES = "delay queues"
    #: The consumer keeps the failed delivery unsettled and runs the handler on it again
    #: when due (a broker with no queue to park a copy in, or no headers to carry the
    #: count): the count lives in the consumer's memory, and a delivery the broker takes
    #: back (a restart, a cut connection) starts again at attempt 1.
    HOLDING = "holding"


@dataclass(frozen=True)
class Support:
    """One verb's support: its level and how it is done (or why it cannot be)."""

    level: Level
    how: str = ""

    @property
    def available(self) -> bool:
        """True unless unsupported."""
        return self.level is not Level.UNSUPPORTED


def native(how: str = "") -> Support:
    """The broker does it itself."""
    return Support(Level.NATIVE, how)


def emulated(how: str) -> Support:
    """ackbridge does it on top of what the broker offers (*how* says how)."""
    return Support(Level.EMULATED, how)


def unsupported(why: str) -> Support:
    """It cannot be done on this broker (*why* says why)."""
    return Support(Level.UNSUPPORTED, why)


class Durability(enum.StrEnum):
    """Where a message is when the broker confirms it: what survives which failure."""

    #: Written and fsynced before the confirm: survives a broker kill and a power loss.
    ON_DISK = "on disk"
    #: Written (and synced) on a majority of replicas before the confirm: survives losing a minority of nodes.
    REPLICATED = "replicated"
    #: Written to the operating system before the confirm, fsynced later: survives a broker kill, not a power loss.
    WRITTEN = "written, synced later"
    #: Held in the broker's memory and saved later: a broker kill before the next save loses it.
    UNTIL_NEXT_SAVE = "in memory until the next save"
    #: Held in memory only: gone with the broker process.
    IN_MEMORY = "in memory"
    #: The protocol does not say and the plugin cannot tell (a generic peer).
    NOT_TOLD = "not told"


@dataclass(frozen=True)
class ConfirmDurability:
    """What "confirmed" means on one broker: its :class:`Durability` level and how
    (the settings that make a confirm durable, and what weakens it)."""

    level: Durability
    how: str = ""


NOT_DECLARED = ConfirmDurability(Durability.NOT_TOLD, "the plugin does not declare it")


class RejectFate(enum.StrEnum):
    """Where a rejected message goes on one broker (what ``reject`` really does)."""

    #: Always to a dead-letter target (the plugin's own companion, or it is not rejected at all).
    DEAD_LETTERS = "dead-letters"
    #: To the queue's dead-letter target where it has one; otherwise the broker DISCARDS it.
    DEAD_LETTERS_IF_TARGET = "dead-letters where the queue has a target, else discards"
    #: The broker drops it.
    DISCARDS = "discards"
    #: The broker cannot reject (the verb is unsupported).
    NO_REJECT = "no reject"
    #: The plugin does not say.
    NOT_TOLD = "not told"


@dataclass(frozen=True)
class RejectOutcome:
    """What a reject does on one broker: its :class:`RejectFate` and how (where the
    target comes from, what happens without one)."""

    fate: RejectFate
    how: str = ""


REJECT_NOT_DECLARED = RejectOutcome(RejectFate.NOT_TOLD, "the plugin does not declare it")

#: How to bound a requeue loop where the plugin does not say.
REQUEUE_BOUND_DEFAULT = ("consume(max_deliveries=N) dead-letters a message delivered more than N times (where the "
                         "broker counts deliveries); or reject it instead of requeueing it")


class DeadLetter(enum.StrEnum):
    """Whether a queue has a dead-letter target, as a transport can tell."""

    KNOWN = "known"
    NONE = "none"
    CANNOT_TELL = "cannot tell"


@dataclass(frozen=True)
class DeadLetterTarget:
    """A transport's answer to "where would a message rejected from this queue go?"

    ``KNOWN``: ``where`` names the target; ``NONE``: a reject discards it and ``where``
    says why (how the transport knows); ``CANNOT_TELL``: the capability table's
    :class:`RejectOutcome` is all that is known."""

    state: DeadLetter
    where: str = ""


CANNOT_TELL = DeadLetterTarget(DeadLetter.CANNOT_TELL)

#: What a plugin that declares no ``connection_free_acks`` gets.
BOUND_TO_CONNECTION = Support(Level.UNSUPPORTED, "a delivery is settled only on the connection that received it")
#: What a plugin that declares no ``delayed_retry`` gets: the pipeline refuses a policy with retries.
NO_DELAYED_RETRY = Support(Level.UNSUPPORTED, "the plugin does not declare whether ackbridge.pipeline can "
                           "delay a retry on this broker")
#: What a plugin that declares no ``lease_extension`` gets.
NO_LEASE_EXTENSION = Support(Level.UNSUPPORTED, "the plugin does not offer delivery.extend()")


@dataclass(frozen=True)
class Capabilities:
    """The verb table of one broker adapter.

    ``ordered_acks`` means the wire acks must leave in receive order (MQTT);
    the core then holds later acks until earlier deliveries are settled.
    ``max_prefetch`` is the largest prefetch the protocol can carry (None: no
    limit); the core refuses a larger one before anything is sent.
    ``topology`` declares the :class:`Topology` verbs (declare, delete, purge,
    inspect a queue); a verb not listed there is unsupported.
    ``confirm_durability`` says what a confirmed publish has survived on this
    broker (on disk, replicated, in memory until the next save...); a plugin
    written before it existed declares nothing and shows "not told".
    ``connection_free_acks`` says whether a delivery can be settled by its ack
    handle (``delivery.ack_handle``) from any connection, not only the one that
    received it (:mod:`ackbridge.engine.handles`); unsupported unless declared.
    ``reject_outcome`` says where a rejected message goes (dead-lettered, only
    where the queue has a target, discarded); "not told" unless declared.
    ``requeue_bound`` says how to bound a requeue loop on this broker (a
    message requeued on every delivery loops forever otherwise); the core's
    requeue-loop warning quotes it.
    ``lease_extension`` says whether ``delivery.extend()`` can push back the
    broker's redelivery deadline for a delivery under slow work (JetStream
    ``+WPI``, the embedded broker's lease), and, where it cannot, what deadline
    the broker keeps (:mod:`ackbridge.engine.leases`); unsupported unless declared.
    ``delayed_retry`` says how :mod:`ackbridge.pipeline`'s redelivery policy waits
    between attempts on this broker: native (the broker holds the copy back) or
    emulated, the way ``retry_method`` says (:class:`RetryMethod`: a confirmed copy in a
    delay queue per back-off level, moved back by the pipeline when due; or the delivery
    held unsettled by the consumer until due); unsupported unless declared, and then the
    pipeline refuses a policy with more than one attempt.
    ``source_patterns`` says what ``consume()`` / ``declare_queue()`` accept
    besides one queue name: None (the default) means a source names exactly
    one queue, topic or address and no character in it is a wildcard; a text
    means the source may be a pattern matching many (MQTT topic filters with
    ``+`` / ``#``), and says how it is written and what holds its messages.
    """

    broker: str
    verbs: Mapping[Verb, Support]
    ordered_acks: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    max_prefetch: int | None = None
    topology: Mapping[Topology, Support] = field(default_factory=dict)
    confirm_durability: ConfirmDurability = NOT_DECLARED
    connection_free_acks: Support = BOUND_TO_CONNECTION
    reject_outcome: RejectOutcome = REJECT_NOT_DECLARED
    requeue_bound: str = REQUEUE_BOUND_DEFAULT
    source_patterns: str | None = None
    lease_extension: Support = NO_LEASE_EXTENSION
    delayed_retry: Support = NO_DELAYED_RETRY
    retry_method: RetryMethod = RetryMethod.DELAY_QUEUES

    def __post_init__(self) -> None:
        missing = [v.value for v in Verb if v not in self.verbs]
        if missing:
            raise ValueError(f"capabilities of {self.broker} do not declare: {', '.join(missing)}")

    def support(self, verb: Verb) -> Support:
        """How this broker does *verb* (native, emulated or unsupported)."""
        return self.verbs[verb]

    def topology_support(self, verb: Topology) -> Support:
        """How this broker does the topology *verb*; unsupported when not declared."""
        return self.topology.get(verb) or unsupported(f"the {self.broker} plugin does not offer it")

    def require_topology(self, verb: Topology) -> Support:
        """Return the support for the topology *verb* or raise UnsupportedVerbError."""
        found = self.topology_support(verb)
        if not found.available:
            raise UnsupportedVerbError(self.broker, verb.value, found.how)
        return found

    def check_prefetch(self, prefetch: int) -> None:
        """Raise InvalidOptionError if *prefetch* is above what the protocol carries."""
        if self.max_prefetch is not None and prefetch > self.max_prefetch:
            from ackbridge.errors import InvalidOptionError

            raise InvalidOptionError(
                f"prefetch {prefetch} is above {self.max_prefetch}, the largest prefetch {self.broker} can carry")

    def require(self, verb: Verb) -> Support:
        """Return the support for *verb* or raise UnsupportedVerbError."""
        found = self.verbs[verb]
        if not found.available:
            raise UnsupportedVerbError(self.broker, verb.value, found.how)
        return found

    def require_retry(self) -> Support:
        """The ``delayed_retry`` support, or raise UnsupportedVerbError."""
        found = self.delayed_retry
        if not found.available:
            raise UnsupportedVerbError(self.broker, "delayed retry (ackbridge.pipeline)", found.how)
        return found

    def require_connection_free_acks(self) -> Support:
        """The ``connection_free_acks`` support, or raise UnsupportedVerbError."""
        found = self.connection_free_acks
        if not found.available:
            raise UnsupportedVerbError(self.broker, "settle by ack handle (connection-free acks)", found.how)
        return found

    def rows(self) -> Iterator[tuple[str, str, str]]:
        """(verb, level, how) for every settlement verb."""
        for verb in Verb:
            found = self.verbs[verb]
            yield verb.value, found.level.value, found.how

    def durability_row(self) -> tuple[str, str, str]:
        """("confirmed means", level, how): the row the capability table shows for it."""
        return "confirmed means", self.confirm_durability.level.value, self.confirm_durability.how

    def handle_row(self) -> tuple[str, str, str]:
        """("connection-free acks", level, how): the row the capability table shows for it."""
        return "connection-free acks", self.connection_free_acks.level.value, self.connection_free_acks.how

    def lease_row(self) -> tuple[str, str, str]:
        """("extend lease", level, how): the row the capability table shows for ``delivery.extend()``."""
        return "extend lease", self.lease_extension.level.value, self.lease_extension.how

    def retry_row(self) -> tuple[str, str, str]:
        """("delayed retry", level, how): the row the capability table shows for the pipeline's back-off;
        an emulated level names its method ("emulated (holding)")."""
        level = self.delayed_retry.level
        shown = f"{level.value} ({self.retry_method.value})" if level is Level.EMULATED else level.value
        return "delayed retry", shown, self.delayed_retry.how

    def reject_row(self) -> tuple[str, str, str]:
        """("reject does", fate, how): the row the capability table shows for it."""
        return "reject does", self.reject_outcome.fate.value, self.reject_outcome.how

    def patterns_row(self) -> tuple[str, str, str]:
        """("source patterns", level, how): the row the capability table shows for it."""
        if self.source_patterns is None:
            return "source patterns", Level.UNSUPPORTED.value, "a source names one queue (no wildcards)"
        return "source patterns", Level.NATIVE.value, self.source_patterns

    def property_rows(self) -> list[tuple[str, str, str]]:
        """Every row beyond the verbs and topology: what a confirm means, connection-free acks,
        leases, delayed retry, what reject does, source patterns (the CLI's ``plugins`` table)."""
        return [self.durability_row(), self.handle_row(), self.lease_row(), self.retry_row(), self.reject_row(),
                self.patterns_row()]

    def topology_rows(self) -> Iterator[tuple[str, str, str]]:
        """(verb, level, how) for every topology verb."""
        for topo in Topology:
            found = self.topology_support(topo)
            yield topo.value, found.level.value, found.how
