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
    ACK = "ack"
    REQUEUE = "requeue"
    REJECT = "reject"
    CUMULATIVE_ACK = "cumulative ack"
    CONFIRM = "confirm"
    CONFIRM_REFUSED = "confirm refused"
    DELIVERY_COUNT = "delivery count"
    LABELLED_ACKS = "labelled acks"


class Level(enum.StrEnum):
    NATIVE = "native"
    EMULATED = "emulated"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Support:
    level: Level
    how: str = ""

    @property
    def available(self) -> bool:
        return self.level is not Level.UNSUPPORTED


def native(how: str = "") -> Support:
    return Support(Level.NATIVE, how)


def emulated(how: str) -> Support:
    return Support(Level.EMULATED, how)


def unsupported(why: str) -> Support:
    return Support(Level.UNSUPPORTED, why)


@dataclass(frozen=True)
class Capabilities:
    """The verb table of one broker adapter.

    ``ordered_acks`` means the wire acks must leave in receive order (MQTT);
    the core then holds later acks until earlier deliveries are settled.
    """

    broker: str
    verbs: Mapping[Verb, Support]
    ordered_acks: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        missing = [v.value for v in Verb if v not in self.verbs]
        if missing:
            raise ValueError(f"capabilities of {self.broker} do not declare: {', '.join(missing)}")

    def support(self, verb: Verb) -> Support:
        return self.verbs[verb]

    def require(self, verb: Verb) -> Support:
        """Return the support for *verb* or raise UnsupportedVerbError."""
        found = self.verbs[verb]
        if not found.available:
            raise UnsupportedVerbError(self.broker, verb.value, found.how)
        return found

    def rows(self) -> Iterator[tuple[str, str, str]]:
        for verb in Verb:
            found = self.verbs[verb]
            yield verb.value, found.level.value, found.how
