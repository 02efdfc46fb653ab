"""Spark option maps -> what the connector and ``ackbridge.connect`` need.

Spark hands options as a case-insensitive map of strings. The broker URL must
stay in the option named ``url``: Spark redacts values of keys matching
``spark.sql.redaction.options.regex`` (default ``(?i)url``) in ``explain()``
and the UI. ``username``/``password`` may be given as separate options
(Spark redacts ``password`` keys too). Nothing here ever formats an option
value into a message.

Every option is checked when the connector is handed its map -- at
``load()`` for the source (``schema()``), at ``save()``/``start()`` for the
sink -- so a typo fails before the query starts: unknown names get a "did you
mean" over the connector's options and the broker plugin's
(:mod:`ackbridge_spark.validation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ackbridge.errors import InvalidOptionError
from ackbridge.transport.files import PRIVATE_FILE, parse_mode
from ackbridge_spark.fault_seam import NO_FAULTS, Faults, is_fault_option, parse_faults

#: The connector's own options, as documented (Spark's map is case-insensitive: matched lower case).
OWN_OPTIONS = (
    "url", "queue", "topic", "address", "subscribe", "username", "password", "prefetch", "maxRecordsPerBatch",
    "writeAheadPath", "writeAheadFileMode", "settleOnPlan", "availableNowIdleMs", "dedupeReplayed",
    "failOnDataLoss", "parallelism", "confirmTimeout", "window", "messageIdPrefix", "fetch", "maxPartitionBytes",
    "localFiles",
)
# Test-only faults (``testSeverAfterBatches``...) are no user option: see ackbridge_spark.fault_seam.
_OWN = {name.lower() for name in OWN_OPTIONS}
#: Options Spark itself puts into a writer's/reader's map: never broker options.
SPARK_OPTIONS = ("checkpointLocation", "queryName", "outputMode", "path", "trigger", "mergeSchema")
_SPARK = {name.lower() for name in SPARK_OPTIONS}
_DESTINATION_KEYS = ("queue", "topic", "address", "subscribe")
MAX_DEFAULT_PREFETCH = 65535
#: Default of ``maxPartitionBytes``: a 25,000 x 4 KiB batch goes as 7 tasks, far under Spark's
#: 128 MiB task limit; a 25,000 x 256 B batch (6.4 MB) stays one task.
DEFAULT_PARTITION_BYTES = 16 * 1024 * 1024


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


def _int(options: Mapping[str, str], key: str, default: int, *, minimum: int = 1) -> int:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"ackbridge option {_shown(key)!r} must be an integer") from None
    if value < minimum:
        raise InvalidOptionError(f"ackbridge option {_shown(key)!r} must be >= {minimum}")
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    low = str(raw).strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    raise InvalidOptionError(f"ackbridge option {_shown(key)!r} must be true or false")


def _shown(key: str) -> str:
    """The documented spelling of option *key* (given lower case)."""
    return next((name for name in (*OWN_OPTIONS, *SPARK_OPTIONS) if name.lower() == key), key)


def _with_credentials(url: str, username: str | None, password: str | None) -> str:
    if username is None and password is None:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = quote(username if username is not None else (parts.username or ""), safe="")
    auth = user + (":" + quote(password, safe="") if password is not None else "")
    return urlunsplit((parts.scheme, f"{auth}@{host}", parts.path, parts.query, parts.fragment))


def split_sources(text: str) -> tuple[str, ...]:
    """``"a, b,c"`` -> ``("a", "b", "c")``: a comma-separated list of queues, topic
    filters or addresses (Kafka's ``subscribe`` is spelled so too)."""
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise InvalidOptionError("an empty name in the ackbridge source list (queue/topic/address/subscribe)")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidOptionError(f"the ackbridge source list names {dupes[0]!r} twice")
    return names


@dataclass(frozen=True)
class ConnectorOptions:
    """Parsed options. ``url`` holds the secret: never put it in a message or log."""

    url: str = field(repr=False)
    #: Where the source reads from (each row's ``source`` column names one); the sink publishes to the first.
    sources: tuple[str, ...]
    prefetch: int
    max_records_per_batch: int
    write_ahead_path: str | None
    #: Mode of write-ahead files (they hold message bodies): owner-only unless relaxed.
    write_ahead_file_mode: int
    settle_on_plan: bool
    available_now_idle_ms: int
    dedupe_replayed: bool
    confirm_timeout: float | None
    window: int | None
    message_id_prefix: str | None
    #: Test-only faults (:mod:`ackbridge_spark.fault_seam`): none unless a test asked.
    faults: Faults = NO_FAULTS
    #: A gap reported by loss detection (``ackbridge-seq`` numbers) fails the query.
    fail_on_data_loss: bool = False
    #: Reader processes (each with its own broker connection) and the least partitions per batch.
    parallelism: int = 1
    #: Most Arrow bytes of rows one task carries inside itself (no ``writeAheadPath``): a larger
    #: batch is planned as several partitions (:func:`ackbridge_spark.push.partition.in_task_partitions`).
    max_partition_bytes: int = DEFAULT_PARTITION_BYTES
    #: Batch files are fsynced (file and directory) before Spark may plan on them. False only for
    #: the parallel readers' private temporary directory, which no restarted query reads.
    write_ahead_durable: bool = True
    #: Batches of 1 MiB or more go to their tasks as files once the tasks are seen running in the
    #: runner's JVM (local mode: :mod:`ackbridge_spark.push.local_files`).
    local_files: bool = True
    #: Everything else, passed to ``ackbridge.connect`` (plugin options such as ``lease_timeout``).
    passthrough: Mapping[str, str] = field(repr=False, default_factory=dict)

    def __repr__(self) -> str:
        return f"ConnectorOptions(sources={self.sources!r}, max_records_per_batch={self.max_records_per_batch})"

    @property
    def destination(self) -> str:
        return self.sources[0]

    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.passthrough)
        if self.confirm_timeout is not None:
            kwargs["confirm_timeout"] = self.confirm_timeout
        if self.window is not None:
            kwargs["window"] = self.window
        return kwargs


def _file_mode(text: str | None) -> int:
    if not text:
        return PRIVATE_FILE
    try:
        mode = parse_mode(text)
    except ValueError:
        raise InvalidOptionError(f"ackbridge option 'writeAheadFileMode' must be an octal mode like 640, "
                                 f"not {text!r}") from None
    if mode & 0o600 != 0o600 or mode & ~0o666:
        raise InvalidOptionError("ackbridge option 'writeAheadFileMode' must keep owner read/write and "
                                 "set no execute bits (e.g. 600, 640, 660)")
    return mode


def _confirm_timeout(raw: str | None) -> float | None:
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = float(str(raw))
    except ValueError:
        raise InvalidOptionError("ackbridge option 'confirmTimeout' must be a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise InvalidOptionError("ackbridge option 'confirmTimeout' must be a number of seconds > 0")
    return value


def parse(options: Mapping[str, str], *, check_plugin: bool = True) -> ConnectorOptions:
    """Parse and check *options*; with *check_plugin*, also the broker plugin's
    options (names with "did you mean", types and values) against the URL's scheme."""
    opts = _lower(options)
    url = opts.get("url")
    if not url:
        raise InvalidOptionError("the ackbridge data source needs option 'url' (e.g. local:///tmp/ackbridge.db)")
    given = [k for k in _DESTINATION_KEYS if opts.get(k)]
    if not given:
        raise InvalidOptionError("the ackbridge data source needs option 'queue' (or 'topic' / 'address' / "
                                 "'subscribe'), a name or a comma-separated list")
    if len(given) > 1:
        raise InvalidOptionError(f"give one of the ackbridge options {', '.join(map(repr, given))}, not several")
    sources = split_sources(opts[given[0]])
    url = _with_credentials(url, opts.get("username"), opts.get("password"))
    max_rows = _int(opts, "maxrecordsperbatch", 1000)
    # Twice the batch keeps the next batch arriving while one is in Spark; capped at
    # 65535, the largest prefetch AMQP 0-9-1 (a 16-bit basic.qos) and MQTT (receive
    # maximum) can carry, so a large maxRecordsPerBatch alone never asks for more.
    prefetch = _int(opts, "prefetch", min(MAX_DEFAULT_PREFETCH, max(100, 2 * max_rows)))
    passthrough = {k: v for k, v in opts.items() if k not in _OWN and k not in _SPARK and not is_fault_option(k)}
    parsed = ConnectorOptions(
        url=url,
        sources=sources,
        prefetch=prefetch,
        max_records_per_batch=max_rows,
        write_ahead_path=opts.get("writeaheadpath") or None,
        write_ahead_file_mode=_file_mode(opts.get("writeaheadfilemode")),
        settle_on_plan=_bool(opts, "settleonplan", True),
        available_now_idle_ms=_int(opts, "availablenowidlems", 1000, minimum=0),
        dedupe_replayed=_bool(opts, "dedupereplayed", True),
        confirm_timeout=_confirm_timeout(opts.get("confirmtimeout")),
        window=_int(opts, "window", 1000) if opts.get("window") else None,
        message_id_prefix=opts.get("messageidprefix") or None,
        faults=parse_faults(opts),
        fail_on_data_loss=_bool(opts, "failondataloss", False),
        parallelism=_int(opts, "parallelism", 1),
        max_partition_bytes=_int(opts, "maxpartitionbytes", DEFAULT_PARTITION_BYTES, minimum=1024),
        local_files=_bool(opts, "localfiles", True),
        passthrough=passthrough,
    )
    if check_plugin:
        from ackbridge_spark.validation import check_broker_options, check_parallelism

        check_broker_options(parsed)
        check_parallelism(parsed)
    return parsed
