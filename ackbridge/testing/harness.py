"""What the conformance suite needs from a broker, beyond the client API.

The harness answers from the BROKER's side (management API, rabbitmqctl, the
SQLite file), never from what the client believes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from ackbridge.testing.faults import faults
from ackbridge.testing.proxy import FaultProxy


def eventually(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll *predicate* until it returns a truthy value or *timeout* passes."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{message} not reached within {timeout} s (last value: {last!r})")


class BrokerHarness:
    """Base class; each plugin's tests implement one."""

    #: Short name shown in test ids, e.g. "rabbitmq-quorum".
    name = "broker"
    #: Whether the harness can report unacked counts broker-side.
    can_count_unacked = True
    #: Whether hold_confirms() really stops confirms (so back-pressure can be observed).
    can_hold_confirms = False
    #: False when hold_confirms() parks the publishes client-side (the broker cannot be told
    #: to withhold confirms): a cut then meets publishes that never left, which are sent
    #: late (one attempt each), not sent again.
    holds_confirms_on_the_wire = True
    #: False for a log (RabbitMQ streams): the broker knows what a consumer settled (its
    #: stored offset), not what it was handed. ready() then counts every message not
    #: settled, the suite checks ready + unacked together, and a new connection cannot
    #: be told which messages an earlier one was handed (no redelivered flag there).
    counts_deliveries = True
    #: Verbs whose conformance tests may be skipped because capabilities declare the gap
    #: are derived from the adapter's capability table, not listed here.

    def url(self, **options: Any) -> str:
        """A broker URL (options may be added as query parameters)."""
        raise NotImplementedError

    def connect_options(self) -> dict[str, Any]:
        """Options every conformance connection should use (e.g. a protocol version)."""
        return {}

    def new_queue(self, *, dead_letter: bool = True) -> str:
        """Create a uniquely named queue/topic (with a dead-letter target when asked);
        return the name used for both consume() and publish()."""
        raise NotImplementedError

    def publish_target(self, queue: str) -> str:
        """Destination to publish to so that messages land in *queue*."""
        return queue

    def unroutable_target(self) -> str | None:
        """A destination whose publishes the broker refuses, or None if it cannot."""
        return None

    def oversized_body(self) -> bytes | None:
        """A body the broker refuses (confirm refused), or None if none is refused."""
        return None

    def ready(self, queue: str) -> int:
        """Messages waiting in *queue*, broker-side."""
        raise NotImplementedError

    def unacked(self, queue: str) -> int:
        """Messages delivered from *queue* but not settled, broker-side."""
        raise NotImplementedError

    def dead_lettered(self, queue: str) -> list[bytes]:
        """Bodies held in *queue*'s dead-letter target, broker-side."""
        raise NotImplementedError

    def break_connection(self, connection: Any) -> None:
        """Cut *connection* (Connection or AsyncConnection) the way a network or broker
        fault would; return once the client has seen it."""
        raise NotImplementedError

    @contextlib.contextmanager
    def hold_confirms(self, connection: Any) -> Iterator[None]:
        """Keep the broker from confirming publishes inside the block, if possible."""
        yield

    def cleanup(self) -> None:
        """Delete what new_queue created."""


class ProxiedHarness(BrokerHarness):
    """A harness whose client connects through a :class:`~ackbridge.testing.proxy.FaultProxy`
    (``self.proxy``): a cut resets the proxy's sockets, held confirms hold its replies."""

    proxy: FaultProxy

    def cut_seen(self, connection: Any) -> Callable[[], bool]:
        """A check that turns true once the client has seen a cut (default: a new generation)."""
        seam = faults(connection)
        before = seam.generation
        return lambda: seam.generation != before

    def break_connection(self, connection: Any) -> None:
        if self.proxy.replies_held:
            # A client whose writes leave on its own I/O thread (proton's container) may
            # not have sent what was just published: cut only once its bytes stop
            # arriving, so the cut meets them on the wire, unconfirmed.
            until_quiet(lambda: self.proxy.bytes_to_target, quiet_s=0.3, limit_s=5.0)
        seen = self.cut_seen(connection)
        self.proxy.reset()
        eventually(seen, timeout=15, message="client noticed the cut")

    @contextlib.contextmanager
    def hold_confirms(self, connection: Any) -> Iterator[None]:
        with self.proxy.held_replies():
            yield


def until_quiet(count: Callable[[], int], *, quiet_s: float, limit_s: float) -> None:
    """Return once *count* has not moved for *quiet_s* (or after *limit_s* in all)."""
    deadline = time.monotonic() + limit_s
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
