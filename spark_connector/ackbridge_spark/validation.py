"""Checking a Spark option map against the broker plugin before the query starts.

Spark lower-cases option names, and everything the connector does not know
goes to ``ackbridge.connect`` as a plugin option. Without this check a typo
(``maxRecordPerBatch``) surfaced after ``start()``, inside the runner or a
task, as a plugin error that named no Spark option. Here an unknown name
fails with a "did you mean" over both vocabularies, and the plugin's own
option check (types, ranges) runs on the driver, at ``load()``/``save()``.
"""

from __future__ import annotations

import difflib

from ackbridge.errors import AckbridgeError, InvalidOptionError
from ackbridge.urls import parse_url, redact
from ackbridge_spark.options import OWN_OPTIONS, SPARK_OPTIONS, ConnectorOptions


def _plugin_names(url: str) -> tuple[str, list[str]]:
    """(plugin name, every option name ``ackbridge.connect`` accepts for *url*)."""
    from ackbridge.options import CONNECTION_OPTIONS, CORE_OPTIONS
    from ackbridge.plugins import registry

    parsed = parse_url(url)
    spec = registry().adapter(parsed.scheme)
    names = [s.name for s in (*CORE_OPTIONS, *CONNECTION_OPTIONS, *spec.option_specs)]
    return f"{spec.name} ({parsed.scheme}://)", names


def suggest(name: str, plugin_names: list[str]) -> str | None:
    """The closest known option to *name* (lower case, as Spark hands it), spelled as documented."""
    from ackbridge_spark.fetch.options import FETCH_ONLY
    from ackbridge_spark.log.options import LOG_ONLY

    spelled = {n.lower(): n for n in plugin_names}
    # Every source's own options: a typo of one is named whichever source the URL picks.
    spelled.update({n.lower(): n for n in (*OWN_OPTIONS, *SPARK_OPTIONS, *FETCH_ONLY, *LOG_ONLY)})
    # snake_case and camelCase users miss each other's separators: compare without
    # them (where both spell one thing, confirm_timeout / confirmTimeout, the Spark one wins).
    bare = {k.replace("_", ""): k for k in spelled if "_" in k}
    bare.update({k: k for k in spelled if "_" not in k})
    close = difflib.get_close_matches(name.replace("_", ""), list(bare), n=1, cutoff=0.75)
    return spelled[bare[close[0]]] if close else None


def _scrubbed(text: str, secret: str | None) -> str:
    text = redact(text)
    return text.replace(secret, "***") if secret else text


def check_broker_options(options: ConnectorOptions) -> None:
    """Raise InvalidOptionError for an unknown or ill-typed option (never showing a password)."""
    from ackbridge.connect import resolve

    secret = None
    try:
        secret = parse_url(options.url).password_text
        owner, names = _plugin_names(options.url)
        known = set(names)
        for key in sorted(options.passthrough):
            if key in known:
                continue
            close = suggest(key, names)
            hint = f"; did you mean {close!r}?" if close else ""
            raise InvalidOptionError(
                f"the ackbridge data source has no option {key!r}{hint} (its own options: see docs/spark.md; "
                f"{owner} accepts: {', '.join(sorted(known))})")
        resolve(options.url, options.connect_kwargs())
    except InvalidOptionError as exc:
        raise InvalidOptionError(_scrubbed(str(exc), secret)) from None
    except AckbridgeError as exc:
        raise type(exc)(_scrubbed(str(exc), secret)) from None


def check_parallelism(options: ConnectorOptions) -> None:
    """``parallelism=N`` needs sources N readers can share (see :mod:`ackbridge_spark.push.parallel`)."""
    n, sources = options.parallelism, options.sources
    if n == 1 or len(sources) >= n:
        return  # one reader, or each reader its own share of the sources
    scheme = parse_url(options.url).scheme
    if scheme in ("mqtt", "mqtts"):
        raise InvalidOptionError(
            f"parallelism={n} with {len(sources)} MQTT topic(s): a topic's persistent session can have one "
            f"reader only; list at least {n} topics/filters (each reader takes its share) or lower parallelism")
    if options.fail_on_data_loss:
        raise InvalidOptionError(
            f"failOnDataLoss=true with parallelism={n} over {len(sources)} source(s): competing readers each see "
            "part of a producer's sequence, so a gap cannot be told from a message another reader took; list at "
            f"least {n} sources or use parallelism=1")
