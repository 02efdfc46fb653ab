"""The observability tests' in-memory metrics reader, for the drain and lease counters."""

from tests.observability.conftest import metrics  # noqa: F401  (a fixture)
