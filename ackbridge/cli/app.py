"""``ackbridge`` CLI: plugins, publish, consume, topology verbs, demo (and commands plugins add).

Every command takes ``--json``; the broker URL comes from the argument or
``ACKBRIDGE_URL``. ``python -m ackbridge`` runs the same app.
"""

from __future__ import annotations

import enum
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import ackbridge
from ackbridge.cli import deadletters, outbox, topology
from ackbridge.cli.output import console, emit_json, fail, summary, warn
from ackbridge.cli.roundtrip import Tally, consume_many, publish_many
from ackbridge.cli.shutdown import consume_until_stopped
from ackbridge.connect import connect
from ackbridge.errors import AckbridgeError, BrokerError, UnsupportedVerbError
from ackbridge.plugins import registry
from ackbridge.urls import redact

# rich_markup_mode=None: help text is shown as written. With rich markup on, "ackbridge[prometheus]"
# in a help line lost its "[prometheus]" (read as a style tag).
app = typer.Typer(help="ackbridge: one acknowledgement model for every broker.", no_args_is_help=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None)

DEFAULT_DEMO_URL = "local://.ackbridge/demo.db"
#: ``consume`` stopped by a second SIGTERM/SIGINT (the shell's 128 + SIGINT): the summary it printed is partial.
EXIT_FORCED = 130
URL_HELP = "broker URL, e.g. amqp://guest:guest@127.0.0.1/ (default: $ACKBRIDGE_URL)"
UrlArg = Annotated[str, typer.Argument(help=URL_HELP, envvar="ACKBRIDGE_URL", show_envvar=True, metavar="URL")]
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help="queue / topic / address")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]


class SettleMode(enum.StrEnum):
    """How ``consume`` settles each delivery."""

    ACK = "ack"
    REQUEUE = "requeue"
    REJECT = "reject"
    NONE = "none"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ackbridge {ackbridge.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """ackbridge: one acknowledgement model for every broker."""


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False, disable=quiet)


@app.command()
def plugins(as_json: JsonOpt = False) -> None:
    """List plugins (with load errors) and each adapter's capability table."""
    reg = registry()
    if as_json:
        emit_json({
            "plugins": [{"name": s.name, "entry_point": s.value, "ok": s.ok, "schemes": list(s.schemes),
                         "error": s.error} for s in reg.statuses],
            "adapters": [{"name": spec.name, "plugin": spec.plugin, "schemes": list(spec.schemes),
                          "tables": [{"broker": caps.broker, "notes": list(caps.notes),
                                      "verbs": {v: {"support": lvl, "how": how} for v, lvl, how in caps.rows()},
                                      "topology": {v: {"support": lvl, "how": how}
                                                   for v, lvl, how in caps.topology_rows()},
                                      "confirm_durability": {"level": caps.confirm_durability.level.value,
                                                             "how": caps.confirm_durability.how},
                                      "connection_free_acks": {"support": caps.handle_row()[1],
                                                               "how": caps.handle_row()[2]},
                                      "properties": {row: {"support": lvl, "how": how}
                                                     for row, lvl, how in caps.property_rows()}}
                                     for caps in (spec.capabilities, *spec.variants)]}
                         for spec in reg.specs()],
        })
        return
    table = Table(title="plugins (entry-point group 'ackbridge')")
    for column in ("plugin", "entry point", "status", "schemes / error"):
        table.add_column(column)
    for status in reg.statuses:
        shown = ", ".join(status.schemes) if status.ok else status.error
        state = "[green]ok[/green]" if status.ok else "[red]failed[/red]"
        table.add_row(escape(status.name), escape(status.value), state, escape(shown or ""))
    console.print(table)
    for spec in reg.specs():
        for caps in (spec.capabilities, *spec.variants):
            verbs = Table(title=f"{caps.broker}  ({', '.join(s + '://' for s in spec.schemes)})")
            verbs.add_column("verb", no_wrap=True)
            verbs.add_column("support", no_wrap=True)
            verbs.add_column("how")
            for verb, level, how in (*caps.rows(), *caps.topology_rows()):
                colour = {"native": "green", "emulated": "yellow", "unsupported": "red"}[level]
                verbs.add_row(escape(verb), f"[{colour}]{level}[/{colour}]", escape(how))
            # What a confirm has survived, connection-free acks, leases, delayed retry, reject, patterns.
            for row in caps.property_rows():
                verbs.add_row(*map(escape, row))
            console.print(verbs)
            for note in caps.notes:
                console.print(f"  note: {escape(note)}")


def _warn_if_nothing_keeps(conn: ackbridge.Connection, queue: str) -> None:
    """Where the broker can tell, warn before publishing to a queue (or an MQTT topic
    without a persistent session) that keeps nothing."""
    if not conn.capabilities.topology_support(ackbridge.Topology.INSPECT_QUEUE).available:
        return
    try:
        conn.inspect_queue(queue)
    except BrokerError as exc:
        warn(f"{exc}")
    except AckbridgeError:
        pass  # the publish itself will say what is wrong


@app.command()
def publish(
    url: UrlArg,
    queue: QueueOpt = "ackbridge",
    count: Annotated[int | None, typer.Option("-n", "--count", min=1,
                                              help="messages to publish (default 1000; 1 with --body)")] = None,
    size: Annotated[int, typer.Option(min=1, help="body size in bytes of generated bodies")] = 256,
    window: Annotated[int, typer.Option(min=1, help="unconfirmed publishes in flight")] = 1000,
    body: Annotated[str | None, typer.Option(help="publish this text (UTF-8) as the body; '-' reads the "
                                                   "body's bytes from stdin")] = None,
    message_id: Annotated[str | None, typer.Option(help="the message id (one message only; default: "
                                                        "generated)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Publish N messages with confirms and count the outcomes, with the broker's reasons.
    Exits 1 if any publish was refused or its outcome is unknown."""
    payload = None if body is None else sys.stdin.buffer.read() if body == "-" else body.encode()
    count = count if count is not None else 1 if payload is not None else 1000
    if message_id is not None and count != 1:
        fail(ValueError(f"--message-id names one message; got -n {count} (ids must differ)"), as_json=as_json)
    try:
        with connect(url) as conn:
            _warn_if_nothing_keeps(conn, queue)
            with _progress(as_json) as progress:
                task = progress.add_task("publishing", total=count)
                tally, _ = publish_many(conn, queue, count, size, window, uuid.uuid4().hex[:8],
                                        lambda n: progress.advance(task, n), body=payload, message_id=message_id)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    outcomes = {s: tally.outcomes[s] for s in ("confirmed", "refused", "unknown")}
    reasons = Counter({k: v for k, v in tally.reasons.items()})
    if as_json:
        emit_json({"queue": queue, "published": tally.published, **outcomes,
                   "reasons": [{"status": s, "reason": r, "count": n} for (s, r), n in reasons.most_common()]})
    else:
        summary({"published": tally.published, **outcomes}, f"publish to {queue!r}")
        if reasons:
            table = Table(title="why not confirmed", title_justify="left")
            table.add_column("status", no_wrap=True)
            table.add_column("count", justify="right", no_wrap=True)
            table.add_column("broker's reason")
            for (status, reason), n in reasons.most_common():
                table.add_row(escape(status), str(n), escape(redact(reason)) or "(none given)")
            console.print(table)
    if outcomes["refused"] or outcomes["unknown"]:
        raise typer.Exit(1)


@app.command()
def consume(
    url: UrlArg,
    queue: QueueOpt = "ackbridge",
    mode: Annotated[SettleMode, typer.Option(help="how to settle each delivery")] = SettleMode.ACK,
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="stop after this many")] = 1000,
    prefetch: Annotated[int, typer.Option(min=1)] = 100,
    idle: Annotated[float, typer.Option(help="stop after this many idle seconds")] = 2.0,
    work_ms: Annotated[float, typer.Option(help="simulated work per delivery, in ms, before it is settled", min=0)]
    = 0.0,
    drain_timeout: Annotated[float, typer.Option(
        help="on SIGTERM/SIGINT: seconds the delivery being worked on gets to finish before the rest goes back "
             "to the broker", min=0)] = 30.0,
    as_json: JsonOpt = False,
    metrics_port: Annotated[int | None, typer.Option(
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics while consuming (needs ackbridge[prometheus])",
        min=0, max=65535)] = None,
    metrics_address: Annotated[str, typer.Option(help="address the --metrics-port endpoint listens on")]
    = "127.0.0.1",
) -> None:
    """Consume up to N messages, settling each as --mode says; print a summary.

    SIGTERM or SIGINT drains: nothing more is taken, the delivery in hand is settled,
    the prefetched rest goes back to the broker unsettled (never acked or
    dead-lettered), and the summary is printed (exit 0). A second signal stops at once and
    still prints the summary of what was counted so far, with "forced" (exit 130)."""
    tally = Tally()
    stopping = None
    server = None
    try:
        if metrics_port is not None:
            from ackbridge.observability.prometheus import serve

            server = serve(metrics_port, metrics_address)
            if not as_json:
                typer.echo(f"metrics: {server.url}", err=True)
        with connect(url) as conn, _progress(as_json) as progress:
            task = progress.add_task(f"consuming ({mode.value})", total=count)
            stopping = consume_until_stopped(conn, queue, tally, expect=count, mode=mode.value, prefetch=prefetch,
                                             idle_timeout=idle, work_s=work_ms / 1000, drain_timeout=drain_timeout,
                                             advance=lambda n: progress.advance(task, n))
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    finally:
        if server is not None:
            server.close()
    counts: dict[str, Any] = {"received": tally.received, "settled": tally.settled, "redelivered": tally.redelivered,
                              "duplicates": tally.duplicates}
    interrupted = stopping is not None and stopping.signal_name is not None
    counts["interrupted"] = interrupted
    if stopping is not None and interrupted:
        counts["stopped_by"] = stopping.signal_name
        if stopping.result is not None:
            counts.update({"handed_back": stopping.result.handed_back, "abandoned": stopping.result.abandoned})
        if stopping.forced:
            counts["forced"] = True
    summary(counts, f"consume from {queue!r} ({mode.value})", as_json=as_json)
    if stopping is not None and stopping.forced:
        raise typer.Exit(EXIT_FORCED)


def roundtrip_demo(
    url: Annotated[str, typer.Option(help="broker URL (default: the embedded broker)", envvar="ACKBRIDGE_URL")]
    = DEFAULT_DEMO_URL,
    messages: Annotated[int, typer.Option("-n", "--messages", min=1)] = 2000,
    keep: Annotated[bool, typer.Option("--keep", help="keep the demo's queue instead of deleting it")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Publish N messages with confirms, consume and ack them, print the summary."""
    queue = f"demo-{uuid.uuid4().hex[:8]}"
    if url.startswith("local://"):
        Path(url[len("local://"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        with connect(url) as conn, _progress(as_json) as progress:
            conn.declare_queue(queue)
            try:
                task = progress.add_task("publishing", total=messages)
                tally, confirmed = publish_many(conn, queue, messages, 256, 500, queue,
                                                lambda n: progress.advance(task, n))
                task = progress.add_task("consuming + acking", total=messages)
                consume_many(conn, queue, tally, expect=messages, mode="ack", prefetch=200, idle_timeout=5.0,
                             advance=lambda n: progress.advance(task, n), conflate_count=50, conflate_ms=20)
            finally:
                cleanup(conn, queue, keep=keep)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    summary({"published": tally.published, "confirmed": tally.confirmed, "received": tally.received,
             "settled": tally.settled, "redelivered": tally.redelivered, "duplicates": tally.duplicates,
             "lost": tally.lost(confirmed)}, "demo summary", as_json=as_json)


def cleanup(conn: Any, queue: str, *, keep: bool) -> None:
    """Delete the demo's *queue* (and its dead-letter companion) unless *keep*; say so
    where the broker cannot delete it."""
    if keep:
        warn(f"queue {queue!r} (and its dead-letter companion) is kept (--keep)")
        return
    try:
        conn.delete_queue(queue, dead_letter=True)
    except UnsupportedVerbError as exc:
        warn(f"queue {queue!r} stays on the broker: {exc}")


def print_summary(counts: dict[str, Any], title: str = "demo summary") -> None:
    """Kept for plugins' commands: see :func:`ackbridge.cli.output.summary`."""
    summary(counts, title)


def _plugin_commands() -> dict[str, tuple[Any, str]]:
    """Commands plugins add; a plugin whose hook fails is reported, not fatal."""
    found: dict[str, tuple[Any, str]] = {}

    def register(name: str, function: Any, help: str = "") -> None:
        found[name] = (function, help)

    reg = registry()
    for impl in reg.manager.hook.ackbridge_register_commands.get_hookimpls():
        try:
            impl.function(register=register)
        except Exception as exc:
            warn(f"plugin {impl.plugin_name!r} could not add its commands: {type(exc).__name__}: {exc}")
    return found


BUILT_IN = {"plugins", "publish", "consume", *topology.COMMANDS, *outbox.COMMANDS}


def build_app() -> typer.Typer:
    """The app with the topology verbs and the commands plugins add (``demo`` may be replaced)."""
    topology.add_commands(app)
    outbox.add_commands(app)
    deadletters.add_commands(app)
    extra = _plugin_commands()
    demo, demo_help = extra.pop("demo", (roundtrip_demo, "Run the main job on the embedded broker."))
    app.command("demo", help=demo_help or None)(demo)
    for name, (function, help_text) in extra.items():
        if name not in BUILT_IN:
            app.command(name, help=help_text or None)(function)
    return app


def main() -> None:
    """Entry point of the ``ackbridge`` command."""
    build_app()()
