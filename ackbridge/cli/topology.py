"""Topology verbs of the CLI: ``declare``, ``delete``, ``purge``, ``inspect``.

Each is one API call (``Connection.declare_queue`` ... ``inspect_queue``); a
broker that cannot do it answers with its reason (UnsupportedVerbError).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.markup import escape

from ackbridge.cli.output import console, emit_json, fail, summary, warn
from ackbridge.connect import connect
from ackbridge.errors import AckbridgeError, UnsupportedVerbError

COMMANDS = ("declare", "delete", "purge", "inspect")
URL_HELP = "broker URL (default: $ACKBRIDGE_URL)"
UrlArg = Annotated[str, typer.Argument(help=URL_HELP, envvar="ACKBRIDGE_URL", show_envvar=True, metavar="URL")]
QueueOpt = Annotated[str, typer.Option("--queue", "-q", help="queue / topic / address")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]


def declare(
    url: UrlArg,
    queue: QueueOpt = "ackbridge",
    dead_letter: Annotated[bool | None, typer.Option(
        "--dead-letter/--no-dead-letter",
        help="also declare the dead-letter companion (default: where the broker can)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Declare a queue (on MQTT: the persistent session that keeps its messages)."""
    with_dlq = dead_letter
    try:
        with connect(url) as conn:
            try:
                conn.declare_queue(queue, dead_letter=dead_letter is not False)
                with_dlq = dead_letter is not False
            except UnsupportedVerbError as exc:
                if dead_letter is not None:
                    raise
                warn(f"declared without a dead-letter companion: {exc}")
                conn.declare_queue(queue, dead_letter=False)
                with_dlq = False
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    _done({"declared": queue, "dead_letter": with_dlq}, f"declared {queue!r}", as_json)


def delete(
    url: UrlArg,
    queue: QueueOpt = "ackbridge",
    keep_dead_letter: Annotated[bool, typer.Option(help="keep the dead-letter companion")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete a queue with its messages (and its dead-letter companion)."""
    try:
        with connect(url) as conn:
            conn.delete_queue(queue, dead_letter=not keep_dead_letter)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    _done({"deleted": queue, "dead_letter": not keep_dead_letter}, f"deleted {queue!r}", as_json)


def purge(url: UrlArg, queue: QueueOpt = "ackbridge", as_json: JsonOpt = False) -> None:
    """Drop the ready messages of a queue (unsettled ones stay with their consumer)."""
    try:
        with connect(url) as conn:
            count = conn.purge_queue(queue)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json)
    _done({"purged": queue, "messages": "not told" if count is None else count}, f"purged {queue!r}", as_json)


def inspect(url: UrlArg, queue: QueueOpt = "ackbridge", as_json: JsonOpt = False) -> None:
    """Show a queue's depth, consumers and dead-letter companion, where the broker tells.
    Exits 1 if the queue does not exist."""
    try:
        with connect(url) as conn:
            info = conn.inspect_queue(queue)
    except UnsupportedVerbError as exc:
        fail(exc, as_json=as_json)
    except AckbridgeError as exc:
        fail(exc, as_json=as_json, code=1)
    fields = dataclasses.asdict(info)
    if as_json:
        emit_json(fields)
        return
    summary({k: "not told" if v is None else v for k, v in fields.items() if k != "name"}, f"queue {queue!r}")


def _done(result: dict[str, object], text: str, as_json: bool) -> None:
    if as_json:
        emit_json(result)
    else:
        console.print(escape(text))


def add_commands(app: typer.Typer) -> None:
    """Register the topology verbs on *app*."""
    for function in (declare, delete, purge, inspect):
        app.command(function.__name__)(function)
