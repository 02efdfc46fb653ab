"""``ackbridge`` CLI: plugins, publish, consume, demo (and commands plugins add)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ackbridge.cli.roundtrip import Tally, consume_many, publish_many
from ackbridge.connect import connect
from ackbridge.errors import AckbridgeError
from ackbridge.plugins import registry
from ackbridge.urls import redact

app = typer.Typer(help="ackbridge: one acknowledgement model for every broker.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console()

DEFAULT_DEMO_URL = "local://.ackbridge/demo.db"


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {redact(str(exc))}")
    raise typer.Exit(2)


@app.command()
def plugins() -> None:
    """List plugins (with load errors) and each adapter's capability table."""
    reg = registry()
    table = Table(title="plugins (entry-point group 'ackbridge')")
    for column in ("plugin", "entry point", "status", "schemes / error"):
        table.add_column(column)
    for status in reg.statuses:
        shown = ", ".join(status.schemes) if status.ok else status.error
        table.add_row(status.name, status.value, "[green]ok[/green]" if status.ok else "[red]failed[/red]", shown)
    console.print(table)
    for spec in reg.specs():
        for caps in (spec.capabilities, *spec.variants):
            verbs = Table(title=f"{caps.broker}  ({', '.join(s + '://' for s in spec.schemes)})")
            verbs.add_column("verb")
            verbs.add_column("support")
            verbs.add_column("how")
            for verb, level, how in caps.rows():
                colour = {"native": "green", "emulated": "yellow", "unsupported": "red"}[level]
                verbs.add_row(verb, f"[{colour}]{level}[/{colour}]", how)
            console.print(verbs)
            for note in caps.notes:
                console.print(f"  note: {note}")


@app.command()
def publish(
    url: Annotated[str, typer.Argument(help="broker URL, e.g. amqp://guest:guest@127.0.0.1/")],
    queue: Annotated[str, typer.Option(help="destination queue/topic/address")] = "ackbridge",
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="messages to publish")] = 1000,
    size: Annotated[int, typer.Option(min=1, help="body size in bytes")] = 256,
    window: Annotated[int, typer.Option(min=1, help="unconfirmed publishes in flight")] = 1000,
) -> None:
    """Publish N messages with confirms and count the outcomes."""
    try:
        with connect(url) as conn, _progress() as progress:
            task = progress.add_task("publishing", total=count)
            tally, _ = publish_many(conn, queue, count, size, window, uuid.uuid4().hex[:8],
                                    lambda n: progress.advance(task, n))
    except AckbridgeError as exc:
        _fail(exc)
    table = Table(title="publish")
    table.add_column("published")
    for status in ("confirmed", "refused", "unknown"):
        table.add_column(status)
    table.add_row(str(tally.published), *(str(tally.outcomes[s]) for s in ("confirmed", "refused", "unknown")))
    console.print(table)


@app.command()
def consume(
    url: Annotated[str, typer.Argument(help="broker URL")],
    queue: Annotated[str, typer.Option(help="source queue/topic/address")] = "ackbridge",
    mode: Annotated[str, typer.Option(help="settle each delivery by: ack, requeue, reject or none")] = "ack",
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="stop after this many")] = 1000,
    prefetch: Annotated[int, typer.Option(min=1)] = 100,
    idle: Annotated[float, typer.Option(help="stop after this many idle seconds")] = 2.0,
) -> None:
    """Consume up to N messages, settling each as --mode says; print a summary."""
    if mode not in {"ack", "requeue", "reject", "none"}:
        _fail(ValueError(f"--mode must be ack, requeue, reject or none, not {mode!r}"))
    tally = Tally()
    try:
        with connect(url) as conn, _progress() as progress:
            task = progress.add_task(f"consuming ({mode})", total=count)
            consume_many(conn, queue, tally, expect=count, mode=mode, prefetch=prefetch, idle_timeout=idle,
                         advance=lambda n: progress.advance(task, n))
    except AckbridgeError as exc:
        _fail(exc)
    table = Table(title="consume")
    for column in ("received", "settled", "redelivered", "duplicates"):
        table.add_column(column)
    table.add_row(str(tally.received), str(tally.settled), str(tally.redelivered), str(tally.duplicates))
    console.print(table)


def roundtrip_demo(
    url: Annotated[str, typer.Option(help="broker URL (default: the embedded broker)")] = DEFAULT_DEMO_URL,
    messages: Annotated[int, typer.Option("-n", "--messages", min=1)] = 2000,
) -> None:
    """Publish N messages with confirms, consume and ack them, print the summary."""
    queue = f"demo-{uuid.uuid4().hex[:8]}"
    if url.startswith("local://"):
        Path(url[len("local://"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        with connect(url) as conn, _progress() as progress:
            conn.declare_queue(queue)
            task = progress.add_task("publishing", total=messages)
            tally, confirmed = publish_many(conn, queue, messages, 256, 500, queue,
                                            lambda n: progress.advance(task, n))
            task = progress.add_task("consuming + acking", total=messages)
            consume_many(conn, queue, tally, expect=messages, mode="ack", prefetch=200, idle_timeout=5.0,
                         advance=lambda n: progress.advance(task, n), conflate_count=50, conflate_ms=20)
    except AckbridgeError as exc:
        _fail(exc)
    print_summary({
        "published": tally.published, "confirmed": tally.confirmed, "received": tally.received,
        "settled": tally.settled, "redelivered": tally.redelivered, "duplicates": tally.duplicates,
        "lost": tally.lost(confirmed),
    })


def print_summary(counts: dict[str, Any], title: str = "demo summary") -> None:
    table = Table(title=title)
    for name in counts:
        table.add_column(name)
    table.add_row(*(str(v) for v in counts.values()))
    console.print(table)


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
            console.print(f"[yellow]warning:[/yellow] plugin {impl.plugin_name!r} could not add its commands: "
                          f"{type(exc).__name__}: {redact(str(exc))}")
    return found


def build_app() -> typer.Typer:
    extra = _plugin_commands()
    demo, demo_help = extra.pop("demo", (roundtrip_demo, "Run the main job on the embedded broker."))
    app.command("demo", help=demo_help or None)(demo)
    for name, (function, help_text) in extra.items():
        if name not in {"plugins", "publish", "consume"}:
            app.command(name, help=help_text or None)(function)
    return app


def main() -> None:
    build_app()()
