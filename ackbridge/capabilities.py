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


@dataclass(frozen=True)
class Capabilities:
    """The verb table of one broker adapter.

    ``ordered_acks`` means the wire acks must leave in receive order (MQTT);
    the core then holds later acks until earlier deliveries are settled.
    ``max_prefetch`` is the largest prefetch the protocol can carry (None: no
    limit); the core refuses a larger one before anything is sent.
    ``topology`` declares the :class:`Topology` verbs (declare, delete, purge,
    inspect a queue); a verb not listed there is unsupported.
    """

    broker: str
    verbs: Mapping[Verb, Support]
    ordered_acks: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    max_prefetch: int | None = None
    topology: Mapping[Topology, Support] = field(default_factory=dict)

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

    def rows(self) -> Iterator[tuple[str, str, str]]:
        """(verb, level, how) for every settlement verb."""
        for verb in Verb:
            found = self.verbs[verb]
            yield verb.value, found.level.value, found.how

    def topology_rows(self) -> Iterator[tuple[str, str, str]]:
        """(verb, level, how) for every topology verb."""
        for topo in Topology:
            found = self.topology_support(topo)
            yield topo.value, found.level.value, found.how
