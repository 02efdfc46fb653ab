"""Test support shipped with the core: the conformance suite every adapter runs.

A plugin's test module subclasses :class:`ackbridge.testing.conformance.ConformanceSuite`
and provides a ``harness`` fixture returning a :class:`BrokerHarness`.
"""

from ackbridge.testing.harness import BrokerHarness, eventually

__all__ = ["BrokerHarness", "eventually"]
