"""Options of the executor-side source, for brokers that keep offset logs.

Which source a query gets is decided at ``load()``, from the URL's scheme
alone: a plugin that registers an ``offset_log`` factory
(:class:`ackbridge.plugins.AdapterSpec`) is read by offset ranges on the
executors (:mod:`ackbridge_spark.log.source`); any other broker by the
driver-side source. No plugin is imported by name.

The two sources share what means the same thing (``url``, the source list
spelled ``queue``/``topic``/``address``/``subscribe``, ``maxRecordsPerBatch``,
``failOnDataLoss``, ``settleOnPlan``, ``username``/``password``). Options of
the driver-side source that mean nothing here (``prefetch``, ``parallelism``,
``writeAheadPath``...) are refused with what to use instead, so a query moved
from a queue to a stream does not keep a setting that silently stopped
working. As everywhere, nothing here formats an option value into a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ackbridge.errors import AckbridgeError, InvalidOptionError
from ackbridge.urls import parse_url
from ackbridge_spark.fault_seam import refuse_faults
from ackbridge_spark.log.plan import Starting, parse_starting

if TYPE_CHECKING:
    from ackbridge.options import OptionSpec
from ackbridge_spark.options import _bool, _lower, _with_credentials, split_sources

#: The executor-side source's own options, as documented (matched lower case).
LOG_OPTIONS = (
    "url", "queue", "topic", "address", "subscribe", "username", "password", "maxRecordsPerBatch",
    "minPartitions", "startingOffsets", "consumerReference", "failOnDataLoss", "settleOnPlan",
)
#: Driver-side options that have no meaning for an offset log, and what to use instead.
NOT_FOR_LOGS = {
    "prefetch": "executors read ranges; nothing is prefetched",
    "parallelism": "use minPartitions (tasks per batch); executors read in parallel",
    "writeAheadPath": "replay is deterministic: a range of a log always holds the same records",
    "writeAheadFileMode": "there are no write-ahead files",
    "availableNowIdleMs": "AvailableNow reads up to the end the logs had when the query started",
    "dedupeReplayed": "a replayed range holds the same records; nothing is redelivered",
    "confirmTimeout": "a sink option",
    "window": "a sink option",
    "messageIdPrefix": "a sink option",
    "maxPartitionBytes": "executors read ranges; no rows travel inside a task",
    "localFiles": "executors read ranges; no batch is handed to its tasks",
}
_DESTINATION_KEYS = ("queue", "topic", "address", "subscribe")
_SPARK = {"checkpointlocation", "queryname", "outputmode", "path", "trigger", "mergeschema"}
#: RabbitMQ refuses longer offset-tracking references.
MAX_REFERENCE = 255


@dataclass(frozen=True)
class LogSourceOptions:
    """Parsed options of the executor-side source. ``url`` holds the secret."""

    url: str = field(repr=False)
    #: Streams / super streams, as configured (a row's ``source`` column names one).
    sources: tuple[str, ...]
    #: Under which name the broker stores the query's progress (``OffsetLog.store_offset``).
    reference: str
    #: Offsets per micro-batch over all partitions (None: everything available).
    max_records_per_batch: int | None
    #: Least tasks per non-empty batch (None: one per partition that moved).
    min_partitions: int | None
    starting: Starting
    fail_on_data_loss: bool
    #: Store committed offsets in ``latestOffset`` already (commits/N is on disk by then).
    settle_on_plan: bool
    #: The plugin's name, for the rows' ``broker`` column.
    broker: str
    #: The broker plugin's own options, for ``open_offset_log`` (checked at load()).
    log_options: Mapping[str, str] = field(repr=False, default_factory=dict)

    def __repr__(self) -> str:
        return (f"LogSourceOptions(sources={self.sources!r}, reference={self.reference!r}, "
                f"max_records_per_batch={self.max_records_per_batch}, min_partitions={self.min_partitions})")


def keeps_offset_log(url: str) -> bool:
    """Whether *url*'s plugin reads logs by offset (decided by the registry, never by a plugin's name).
    An unknown scheme answers False: the driver-side parse reports it."""
    from ackbridge.plugins import registry

    try:
        return registry().adapter(parse_url(url).scheme).offset_log is not None
    except AckbridgeError:
        return False


def _plugin(url: str) -> tuple[str, str, list[OptionSpec]]:
    """(plugin name, owner text for messages, the option specs its offset log takes).

    The contract (``AdapterSpec.offset_log``) does not say which options the factory
    takes; the transport's ``option_specs`` are the wrong list (the RabbitMQ streams
    log takes the shared connection options plus read_timeout / read_credit, not the
    consumer's). Until the spec carries them (asked for: ``offset_log_options``), a
    factory may expose them as ``option_specs``; otherwise only the shared connection
    options pass, so nothing reaches an executor that its factory would refuse there."""
    from ackbridge.options import CONNECTION_OPTIONS
    from ackbridge.plugins import registry

    parsed = parse_url(url)
    spec = registry().adapter(parsed.scheme)
    declared = getattr(spec, "offset_log_options", None) or getattr(spec.offset_log, "option_specs", None) or ()
    names = {s.name for s in CONNECTION_OPTIONS}
    return spec.name, f"{spec.name} ({parsed.scheme}:// offset log)", [
        *CONNECTION_OPTIONS, *(s for s in declared if s.name not in names)]


def _check_plugin_options(url: str, given: Mapping[str, str]) -> str:
    from ackbridge.options import resolve_options
    from ackbridge_spark.validation import suggest

    name, owner, specs = _plugin(url)
    names = [s.name for s in specs]
    for key in sorted(given):
        if key in names:
            continue
        close = suggest(key, names + list(LOG_OPTIONS))
        hint = f"; did you mean {close!r}?" if close else ""
        raise InvalidOptionError(
            f"the ackbridge stream source has no option {key!r}{hint} (its own options: "
            f"{', '.join(LOG_OPTIONS)}; {owner} accepts: {', '.join(sorted(names))})")
    resolve_options(specs, given, owner=owner)  # types and ranges, the plugin's own messages
    return name


#: Options only the stream source knows: refused on a queue broker rather than ignored.
LOG_ONLY = ("minPartitions", "startingOffsets", "consumerReference")


def refuse_log_only(options: Mapping[str, str]) -> None:
    """Raise if *options* (for a broker without offset logs) set a stream-source-only option."""
    given = [name for name in LOG_ONLY if name.lower() in _lower(options)]
    if given:
        raise InvalidOptionError(f"ackbridge option {given[0]!r} applies to offset-log brokers only (RabbitMQ "
                                 "streams); this URL's broker is read by the driver-side source")


def _count(opts: Mapping[str, str], name: str) -> int | None:
    """A positive integer option, None when not given."""
    raw = opts.get(name.lower())
    if raw is None or not str(raw).strip():
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"ackbridge option {name!r} must be an integer") from None
    if value < 1:
        raise InvalidOptionError(f"ackbridge option {name!r} must be >= 1")
    return value


def parse_log(options: Mapping[str, str]) -> LogSourceOptions:
    """Parse and check the options of a query on an offset-log broker (no connection is made)."""
    from ackbridge_spark.validation import _scrubbed

    opts = _lower(options)
    url = opts.get("url") or ""
    secret = None
    try:
        secret = parse_url(url).password_text
        return _parse(opts, url)
    except AckbridgeError as exc:
        raise type(exc)(_scrubbed(str(exc), secret)) from None


def _parse(opts: dict[str, str], url: str) -> LogSourceOptions:
    refuse_faults(opts, "the stream source (offset-log brokers are read on the executors)")
    for name, why in NOT_FOR_LOGS.items():
        if name.lower() in opts:
            raise InvalidOptionError(f"ackbridge option {name!r} does not apply to the stream source "
                                     f"(offset-log brokers are read on the executors): {why}")
    given = [k for k in _DESTINATION_KEYS if opts.get(k)]
    if not given:
        raise InvalidOptionError("the ackbridge stream source needs option 'subscribe' (or 'queue' / 'topic' / "
                                 "'address'): a stream or super stream, or a comma-separated list")
    if len(given) > 1:
        raise InvalidOptionError(f"give one of the ackbridge options {', '.join(map(repr, given))}, not several")
    reference = (opts.get("consumerreference") or "").strip()
    if not reference:
        raise InvalidOptionError("the ackbridge stream source needs option 'consumerReference': the name under "
                                 "which the broker stores the query's committed offsets")
    if len(reference.encode("utf-8")) > MAX_REFERENCE:
        raise InvalidOptionError(f"ackbridge option 'consumerReference' is longer than {MAX_REFERENCE} bytes")
    own = {k.lower() for k in LOG_OPTIONS}
    passthrough = {k: v for k, v in opts.items() if k not in own and k not in _SPARK}
    url = _with_credentials(url, opts.get("username"), opts.get("password"))
    broker = _check_plugin_options(url, passthrough)
    return LogSourceOptions(
        url=url,
        sources=split_sources(opts[given[0]]),
        reference=reference,
        max_records_per_batch=_count(opts, "maxRecordsPerBatch"),
        min_partitions=_count(opts, "minPartitions"),
        starting=parse_starting(opts.get("startingoffsets")),
        fail_on_data_loss=_bool(opts, "failondataloss", False),
        settle_on_plan=_bool(opts, "settleonplan", True),
        broker=broker,
        log_options=passthrough,
    )
