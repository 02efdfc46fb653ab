"""The handler pipeline: what happens after a handler fails (docs/failure-policy.md).

One order, outermost first: the redelivery policy (attempts, back-off, dead-letter
with reasons), the circuit breaker, the throttle, the handler timeout. The sync face
is :class:`ackbridge.pipeline.sync.Pipeline`, the asyncio twin
:class:`ackbridge.pipeline.aio.Pipeline`; both wrap a handler over the public API,
so every broker whose queues ackbridge can declare gets the same policy.

- :mod:`.policy`: the I/O-free policy (a failed delivery -> a :class:`~.policy.Plan`);
- :mod:`.headers`: the one header set of retried and dead-lettered copies;
- :mod:`.names`: the delay and dead-letter queues beside a queue;
- :mod:`.copies`: recognising a copy that arrives twice;
- :mod:`.stages`: throttle and circuit breaker rules;
- :mod:`.report`: logs (``ackbridge.pipeline``) and metrics.
"""

from __future__ import annotations

from ackbridge.kernel.backoff import Schedule
from ackbridge.pipeline.headers import (
    ATTEMPT,
    FAILURE_REASON,
    FIRST_FAILURE,
    LAST_FAILURE,
    ORIGINAL_ID,
    ORIGINAL_QUEUE,
    RETRY_DUE,
    RetryState,
)
from ackbridge.pipeline.policy import Exhausted, Plan, RedeliveryPolicy, Step
from ackbridge.pipeline.stages import Circuit, CircuitBreaker, Throttle

__all__ = [
    "ATTEMPT",
    "FAILURE_REASON",
    "FIRST_FAILURE",
    "LAST_FAILURE",
    "ORIGINAL_ID",
    "ORIGINAL_QUEUE",
    "RETRY_DUE",
    "Circuit",
    "CircuitBreaker",
    "Exhausted",
    "Plan",
    "RedeliveryPolicy",
    "RetryState",
    "Schedule",
    "Step",
    "Throttle",
]
