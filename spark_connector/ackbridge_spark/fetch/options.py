"""Options of the executor-fetch source (``fetch=executors``).

``fetch`` picks who receives from a queue broker: ``driver`` (the default, the
driver-side source) or ``executors`` (:mod:`ackbridge_spark.fetch.source`),
which needs a broker whose acks any connection may settle
(``Capabilities.connection_free_acks``: NATS JetStream) and one that tells
how many messages wait (``inspect_queue``). No plugin is named here: the
registry's capability table decides.

The options shared with the driver-side source mean the same (``url``, the
source list, ``maxRecordsPerBatch``, ``writeAheadPath``,
``writeAheadFileMode``, ``settleOnPlan``, ``username``/``password``, the
plugin's own options) and are checked by the same code. Driver-side options
that mean nothing here are refused with what to use instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackbridge.capabilities import Topology
from ackbridge.errors import AckbridgeError, InvalidOptionError
from ackbridge.urls import parse_url
from ackbridge_spark.fault_seam import refuse_source_faults
from ackbridge_spark.options import ConnectorOptions, _int, _lower, parse

#: Values of the ``fetch`` option.
DRIVER, EXECUTORS = "driver", "executors"
#: This source's own options beyond the driver-side source's (matched lower case).
FETCH_ONLY = ("minPartitions", "fetchIdleMs", "fetchTimeoutMs")
#: Driver-side options that have no meaning here, and what to use instead.
NOT_FOR_FETCH = {
    "prefetch": "each fetch task's pull credit is its share of maxRecordsPerBatch",
    "parallelism": "use minPartitions (fetch tasks per batch, on the executors)",
    "availableNowIdleMs": "AvailableNow ends once the durable holds nothing pending or ack-pending",
    "dedupeReplayed": "a retried or replayed task reads its part's rows back from its file",
    "failOnDataLoss": "loss detection (ackbridge-seq gaps) runs in the driver-side source only",
    "maxPartitionBytes": "each fetch task writes its rows to a file; no rows travel inside a task",
    "localFiles": "each fetch task writes its rows to a file; no batch is handed to its tasks",
}
#: Row offsets are batch << 32 | task << 22 | row: limits on tasks and rows per task.
MAX_TASKS = 1 << 10
MAX_ROWS_PER_TASK = 1 << 22


@dataclass(frozen=True)
class FetchOptions:
    """Parsed options; ``base`` holds the URL (the secret) and everything shared."""

    base: ConnectorOptions
    #: Fetch tasks per batch (each pulls its share of max_records_per_batch).
    min_partitions: int
    #: A task stops fetching after this long without a new delivery.
    fetch_idle_ms: int
    #: ... and after this long in all.
    fetch_timeout_ms: int

    def __repr__(self) -> str:
        return (f"FetchOptions(sources={self.base.sources!r}, max_records_per_batch="
                f"{self.base.max_records_per_batch}, min_partitions={self.min_partitions})")

    @property
    def share(self) -> int:
        """Rows one task fetches at most."""
        return -(-self.base.max_records_per_batch // self.min_partitions)

    def connect_kwargs(self) -> dict[str, Any]:
        """For every connection of the source (the driver's and the tasks'): the user's
        plugin options, and a durable ``max_ack_pending`` that fits a whole batch where
        the plugin takes one and the user gave none (else each task's pull credit would
        set the durable's limit to one task's share)."""
        kwargs: dict[str, Any] = dict(self.base.connect_kwargs())
        if "max_ack_pending" not in kwargs and "max_ack_pending" in _plugin_option_names(self.base.url):
            kwargs["max_ack_pending"] = 2 * self.base.max_records_per_batch
        return kwargs


def _plugin_option_names(url: str) -> set[str]:
    from ackbridge.plugins import registry

    return {spec.name for spec in registry().adapter(parse_url(url).scheme).option_specs}


def fetch_mode(options: Mapping[str, str]) -> str:
    """``driver`` or ``executors`` (the ``fetch`` option; checked)."""
    value = str(_lower(options).get("fetch") or DRIVER).strip().lower()
    if value not in (DRIVER, EXECUTORS):
        raise InvalidOptionError("ackbridge option 'fetch' must be 'driver' (the default) or 'executors'")
    return value


def refuse_fetch_only(options: Mapping[str, str]) -> None:
    """The driver-side source refuses this source's own options (they would do nothing)."""
    opts = _lower(options)
    for name in FETCH_ONLY:
        if opts.get(name.lower()) not in (None, ""):
            raise InvalidOptionError(f"ackbridge option {name!r} is for fetch=executors (or, minPartitions, "
                                     "for offset logs); the driver-side source reads on the driver")


def _check_broker(url: str) -> None:
    from ackbridge.plugins import registry

    try:
        caps = registry().adapter(parse_url(url).scheme).capabilities
    except AckbridgeError:
        return  # an unknown scheme: parse() reports it
    if not caps.connection_free_acks.available:
        raise InvalidOptionError(
            f"fetch=executors needs a broker whose acks any connection may settle; {caps.broker}: "
            f"{caps.connection_free_acks.how} (leave fetch unset: the driver-side source)")
    if not caps.topology_support(Topology.INSPECT_QUEUE).available:
        raise InvalidOptionError(f"fetch=executors needs a broker that tells how many messages wait "
                                 f"(inspect_queue); {caps.broker} does not")


def _count(opts: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    try:
        return _int(opts, name.lower(), default, minimum=minimum)
    except InvalidOptionError as exc:
        raise InvalidOptionError(str(exc).replace(repr(name.lower()), repr(name))) from None


def parse_fetch(options: Mapping[str, str]) -> FetchOptions:
    """Parse and check the options of a ``fetch=executors`` source."""
    opts = _lower(options)
    for name, instead in NOT_FOR_FETCH.items():
        if opts.get(name.lower()) not in (None, ""):
            raise InvalidOptionError(f"ackbridge option {name!r} does not apply to fetch=executors: {instead}")
    refuse_source_faults(opts, "fetch=executors")
    _check_broker(opts.get("url") or "")
    base = parse({k: v for k, v in opts.items() if k not in {n.lower() for n in FETCH_ONLY}})
    parsed = FetchOptions(
        base=base,
        min_partitions=_count(opts, "minPartitions", 1),
        fetch_idle_ms=_count(opts, "fetchIdleMs", 500, minimum=50),
        fetch_timeout_ms=_count(opts, "fetchTimeoutMs", 10_000, minimum=100),
    )
    if parsed.min_partitions > MAX_TASKS:
        raise InvalidOptionError(f"ackbridge option 'minPartitions' must be <= {MAX_TASKS} with fetch=executors")
    if parsed.share > MAX_ROWS_PER_TASK:
        raise InvalidOptionError(f"maxRecordsPerBatch / minPartitions must be <= {MAX_ROWS_PER_TASK} rows per "
                                 "fetch task: raise minPartitions")
    return parsed
