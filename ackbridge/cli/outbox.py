"""``ackbridge outbox relay``: publish the committed rows of a transactional outbox.

The relay of :mod:`ackbridge.transactional.relay`, as a process: progress on the
terminal (or a JSON summary), Prometheus metrics with ``--metrics-port``, and
SIGTERM/SIGINT stop it after the round in hand (its rows are settled first, or,
killed mid-round, sent again by the next relay under the same ids).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ackbridge.cli.output import console, fail, summary
from ackbridge.connect import connect
from ackbridge.errors import InvalidOptionError

outbox_app = typer.Typer(help="The transactional outbox (docs/transactional.md).", no_args_is_help=True,
                         rich_markup_mode=None)
COMMANDS = ("outbox",)
URL_HELP = "broker URL (default: $ACKBRIDGE_URL)"
DB_HELP = ("the application's database: postgresql://... (needs ackbridge[postgres]) or a SQLite file "
           "(sqlite:///path or a path)")


def open_database(target: str) -> Any:
    """A DB-API connection to *target*: PostgreSQL (psycopg 3) or a SQLite file."""
    if target.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg
        except ImportError:
            raise InvalidOptionError("a PostgreSQL outbox needs psycopg 3: pip install 'ackbridge[postgres]'"
                                     ) from None
        return psycopg.connect(target)
    import sqlite3

    # sqlite:///relative.db, sqlite:////absolute.db (SQLAlchemy's spelling), or a plain path.
    path = target.removeprefix("sqlite:///")
    return sqlite3.connect(path, timeout=30)


@outbox_app.command()
def relay(
    url: Annotated[str, typer.Argument(help=URL_HELP, envvar="ACKBRIDGE_URL", show_envvar=True, metavar="URL")],
    db: Annotated[str, typer.Option("--db", help=DB_HELP, envvar="ACKBRIDGE_DB", show_envvar=True)],
    table: Annotated[str, typer.Option(help="the outbox table")] = "ackbridge_outbox",
    batch: Annotated[int, typer.Option(min=1, help="rows per round (and unconfirmed publishes at most)")] = 100,
    poll: Annotated[float, typer.Option(min=0.01, help="seconds between rounds that found nothing")] = 0.5,
    idle: Annotated[float | None, typer.Option(
        help="stop once the outbox stayed empty this many seconds (default: run until SIGTERM/SIGINT)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    metrics_port: Annotated[int | None, typer.Option(
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics while relaying (needs ackbridge[prometheus])",
        min=0, max=65535)] = None,
) -> None:
    """Publish committed outbox rows with confirms; remove confirmed rows, move refused ones aside."""
    from ackbridge.transactional import Relay

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    server = None
    started = time.monotonic()
    try:
        if metrics_port is not None:
            from ackbridge.observability.prometheus import serve

            server = serve(metrics_port)
            if not as_json:
                typer.echo(f"metrics: {server.url}", err=True)
        database = open_database(db)
        try:
            with connect(url) as conn, Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                                TimeElapsedColumn(), console=console, disable=as_json) as progress:
                task = progress.add_task("relaying")
                worker = Relay(database, conn, table=table, batch=batch, poll=poll)
                idle_since = time.monotonic()
                while not stop.is_set():
                    round_ = worker.run_once()
                    totals = worker.totals
                    progress.update(task, description=(
                        f"confirmed {totals.confirmed}  refused {totals.refused}  unknown {totals.unknown}  "
                        f"backlog {round_.backlog} (oldest {round_.oldest_age:.1f} s)"))
                    if round_.sent:
                        idle_since = time.monotonic()
                        continue
                    if idle is not None and round_.backlog == 0 and time.monotonic() - idle_since >= idle:
                        break
                    stop.wait(poll)
        finally:
            database.close()
    except Exception as exc:  # ackbridge's, and the database driver's own (sqlite3.Error, psycopg.Error)
        fail(exc, as_json=as_json)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.close()
    totals = worker.totals
    summary({"confirmed": totals.confirmed, "refused": totals.refused, "unknown": totals.unknown,
             "backlog": totals.backlog, "seconds": round(time.monotonic() - started, 1)},
            f"outbox {table}", as_json=as_json)


def add_commands(app: typer.Typer) -> None:
    """Register ``outbox`` (with its ``relay`` command) on *app*."""
    app.add_typer(outbox_app, name="outbox")
