"""Never silently weaker: a plugin that declares nothing about delayed retry (the example
``memory://`` plugin, as an outside author writes one) gets ``NO_DELAYED_RETRY``, and the
pipeline refuses a policy with retries before anything is declared or consumed."""

from __future__ import annotations

import pytest

import ackbridge
from ackbridge.capabilities import NO_DELAYED_RETRY
from ackbridge.pipeline import RedeliveryPolicy
from ackbridge.pipeline.sync import Pipeline


def test_a_broker_that_cannot_delay_refuses_retries_before_anything_is_declared() -> None:
    with ackbridge.connect("memory://refuses-retries") as conn:
        assert conn.capabilities.delayed_retry is NO_DELAYED_RETRY
        pipeline = Pipeline(conn, "orders", policy=RedeliveryPolicy(attempts=3))
        with pytest.raises(ackbridge.UnsupportedVerbError, match=r"does not declare whether ackbridge\.pipeline"):
            pipeline.consume(lambda d: None)
        pipeline.close()
        # Nothing was declared: no delay queue exists in the broker (its process-wide table).
        import ackbridge_memory

        assert not [name for name in ackbridge_memory._QUEUES if name.startswith("orders.retry")]
