"""How the CLI shows results: rich tables that fit 80 columns, or JSON (``--json``).

A summary is drawn as rows of (what, count), not as one wide row, so its
headers are never cut on a narrow terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ackbridge.urls import redact

console = Console()
#: Warnings and errors go to stderr, so ``--json`` output on stdout stays parseable.
err_console = Console(stderr=True)


def emit_json(data: Any) -> None:
    """Print *data* as one JSON document on stdout."""
    typer.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def summary(counts: Mapping[str, Any], title: str, *, as_json: bool = False) -> None:
    """Show *counts* (name -> value) as a two-column table, or as JSON."""
    if as_json:
        emit_json(dict(counts))
        return
    console.print(f"[bold]{escape(title)}[/bold]")
    table = Table()
    table.add_column("what", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    for name, value in counts.items():
        table.add_row(escape(name), escape(str(value)))
    console.print(table)


def warn(text: str) -> None:
    """A warning on stderr (redacted). Text is escaped: rich would read ``ackbridge[prometheus]``
    as a style tag and drop it, telling the user to install ``ackbridge``."""
    err_console.print(f"[yellow]warning:[/yellow] {escape(redact(text))}")


def fail(exc: BaseException, *, as_json: bool = False, code: int = 2) -> None:
    """Report *exc* (redacted) and exit with *code*."""
    text = redact(str(exc))
    if as_json:
        emit_json({"error": text, "type": type(exc).__name__})
    else:
        console.print(f"[red]error:[/red] {escape(text)}")
    raise typer.Exit(code)
