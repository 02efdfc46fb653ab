"""Settle-after-commit and the sink-failure case over MQTT 5 and AMQP 1.0.

The same test bodies as test_source.py (imported, so they cannot drift), with
the broker fixture swapped for the MQTT and AMQP 1.0 harnesses.
"""

from __future__ import annotations

import pytest

from tests.spark.helpers import harness_broker
from tests.spark.test_source import (  # noqa: F401  (pytest collects the imported tests and fixture)
    spark,
    test_foreach_batch_fails_once_then_restart_delivers_all,
    test_unacked_while_sink_blocked_then_settled,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


broker = harness_broker
