"""The Spark sink over MQTT 5, AMQP 1.0 and NATS JetStream: every row confirmed, ids deterministic.

The test body is test_sink.py's, imported so it cannot drift.
"""

from __future__ import annotations

import pytest

from tests.spark.helpers import harness_broker
from tests.spark.test_sink import (  # noqa: F401  (pytest collects the imported test and fixture)
    spark,
    test_batch_sink_publishes_with_deterministic_ids,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

broker = harness_broker
