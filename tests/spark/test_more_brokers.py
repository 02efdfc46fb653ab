"""Settle-after-commit over MQTT 5, AMQP 1.0 and NATS JetStream.

The same test body as test_source.py (imported, so it cannot drift), with the
broker fixture swapped for the MQTT and AMQP 1.0 harnesses. The fault tests
(test_source.py, test_driver_kill.py) run over every broker through
tests/spark/cells.py instead.
"""

from __future__ import annotations

import pytest

from tests.spark.helpers import harness_broker
from tests.spark.test_source import (  # noqa: F401  (pytest collects the imported tests and fixture)
    spark,
    test_unacked_while_sink_blocked_then_settled,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


broker = harness_broker
