"""Connection generations: the one place a delivery goes stale.

A generation is one life of a channel/link/session whose settlement tags are
valid. When it ends, every delivery it carried is stale: settling one must
raise :class:`~ackbridge.errors.StaleDeliveryError` and send nothing, because
its tag may name another message now. Closing a consumer ends its deliveries'
lives the same way (:class:`~ackbridge.errors.ConsumerClosedError`): its
subscription is cancelled and the broker takes them back. The ledger checks first; a transport
re-checks where the race with a loss is decided, through :func:`check_ops`
or :func:`lease_lost`, so that error is raised from this module only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn, overload

from ackbridge.errors import ConsumerClosedError, StaleDeliveryError
from ackbridge.messages import WireSettle


def stale_error(what: str, generation: int) -> StaleDeliveryError:
    """The error for settling *what* (a delivery description) of an ended *generation*."""
    return StaleDeliveryError(
        f"{what} belongs to connection generation {generation}, which has ended; "
        "nothing was sent and the broker will redeliver it"
    )


def closed_error(what: str, source: str) -> ConsumerClosedError:
    """The error for settling *what* after the consumer of *source* was closed: its
    subscription is cancelled, so the broker takes the delivery back."""
    return ConsumerClosedError(
        f"{what}: the consumer of {source!r} was closed before it was settled; "
        "nothing was sent and the broker will redeliver it"
    )


@overload
def check_ops(ops: Sequence[WireSettle], current: None, what: str = "") -> NoReturn: ...
@overload
def check_ops(ops: Sequence[WireSettle], current: int, what: str = "") -> None: ...
def check_ops(ops: Sequence[WireSettle], current: int | None, what: str = "") -> None:
    """Raise if any op belongs to a generation other than *current*; nothing is sent then.

    A transport passes ``current=None`` when no generation is live for *ops* (the
    connection is down, the channel or subscription that carried them is gone): it
    reports the fact, this guard decides and words the error. *what* says where
    the generation went (``"its channel is gone"``)."""
    if current is None:
        reason = f" ({what})" if what else ""
        raise stale_error(f"{len(ops)} settlement(s){reason}", ops[0].generation if ops else 0)
    for op in ops:
        if op.generation != current:
            count = sum(1 for o in ops if o.generation != current)
            raise StaleDeliveryError(
                f"{count} settlement(s) from connection generation {op.generation} (now {current}); "
                "nothing was sent and the broker will redeliver them"
            )


def check_generation(generation: int, current: int | None, what: str = "this delivery") -> None:
    """Raise if *generation* is not the *current* one (None: no live generation)."""
    if current is None or generation != current:
        raise stale_error(what, generation)


def lease_lost(reason: str = "the lease on these deliveries was lost (consumer presumed dead)") -> StaleDeliveryError:
    """The error for a settlement the broker no longer accepts because the
    consumer's claim on the deliveries ended (lease expired, session taken over)."""
    return StaleDeliveryError(f"{reason}; nothing was settled and the broker will redeliver them")
