"""``ackbridge demo``: broker -> Spark -> Parquet with settle-after-commit, counted.

Publishes N messages with confirms (each requesting the ``spark-committed``
label), streams them with ``Trigger.AvailableNow`` into a Parquet table, and
prints the reliability scoreboard: published, confirmed, written, settled,
redelivered, duplicates, lost, labels received.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ackbridge.errors import AckbridgeError, UnsupportedVerbError
from ackbridge.transport.files import private_dir
from ackbridge.urls import redact

if TYPE_CHECKING:
    from rich.console import Console

    from ackbridge import Connection


def _source_stats(query: Any) -> dict[str, Any]:
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return {}
    latest = progress["sources"][0].get("latestOffset")
    return json.loads(latest) if isinstance(latest, str) else dict(latest or {})


def demo(
    messages: Annotated[int, typer.Option("--messages", "-n", help="how many messages to publish")] = 3000,
    url: Annotated[str | None, typer.Option(help="broker URL (default: embedded local:// file in the work dir)")]
    = None,
    workdir: Annotated[Path | None, typer.Option(help="where the broker file, table and checkpoint go")] = None,
    batch: Annotated[int, typer.Option(help="maxRecordsPerBatch")] = 1000,
    keep: Annotated[bool, typer.Option("--keep", help="keep the demo's queue instead of deleting it")] = False,
) -> None:
    """Publish N messages, stream them through Spark into Parquet, settle after commit."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import ackbridge

    console = Console()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local[*] job needs no other interface
    # The broker file, checkpoint and Parquet table hold the messages: owner-only. The
    # umask covers what Spark writes too (the JVM it starts inherits it); this is the
    # demo command's own process, so it is set for the rest of its life.
    os.umask(0o077)
    work = private_dir(workdir or Path(tempfile.mkdtemp(prefix="ackbridge-demo-")))
    broker_url = url or f"local://{work.resolve() / 'broker.db'}"
    queue = f"ackbridge-demo-{uuid.uuid4().hex[:8]}"
    table_path, checkpoint = str(work / "table"), str(work / "checkpoint")
    started = time.monotonic()

    columns = (TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with ackbridge.connect(broker_url) as conn, Progress(*columns, console=console) as progress:
        shown = conn.url.redacted
        console.print(f"broker [bold]{shown}[/]  queue [bold]{queue}[/]  work dir {work}")
        conn.declare_queue(queue)
        t_pub = progress.add_task("published / confirmed", total=messages)
        confirms = []
        for i in range(messages):
            confirms.append(conn.publish(queue, f"demo message {i}".encode(), message_id=f"demo-{i}",
                                         requested_acks=["spark-committed"], ack_timeout=300))
            if i % 200 == 0:
                progress.update(t_pub, completed=sum(1 for c in confirms if c.done()))
        conn.flush(timeout=120)
        confirmed = [c.message_id for c in confirms if c.outcome is not None and c.outcome.confirmed]
        progress.update(t_pub, completed=len(confirmed))

        t_spark = progress.add_task("starting Spark", total=None)
        from pyspark.sql import SparkSession

        import ackbridge_spark

        spark = (SparkSession.builder.master("local[2]").appName("ackbridge-demo")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 # Hadoop's file system applies its own umask (022) to the checkpoint and table
                 .config("spark.hadoop.fs.permissions.umask-mode", "077")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        ackbridge_spark.register(spark)
        progress.update(t_spark, total=1, completed=1)
        t_written = progress.add_task("written to Parquet", total=len(confirmed))
        t_settled = progress.add_task("settled (acked)", total=len(confirmed))
        stream = (spark.readStream.format("ackbridge").option("url", broker_url).option("queue", queue)
                  .option("maxRecordsPerBatch", str(batch)).option("availableNowIdleMs", "1000").load())
        query = (stream.select("message_id", "body", "redelivered", "delivery_count", "timestamp", "offset")
                 .writeStream.format("parquet").option("path", table_path)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        while query.isActive:
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            progress.update(t_written, completed=rows)
            progress.update(t_settled, completed=_source_stats(query).get("settled", 0))
            # pyspark annotates timeout as int but takes float seconds (it sends int(timeout * 1000)).
            query.awaitTermination(0.25)  # type: ignore[arg-type]
        error = query.exception()
        stats = _source_stats(query)
        table = spark.read.parquet(table_path) if os.path.isdir(table_path) else None
        ids = [r["message_id"] for r in table.select("message_id").collect()] if table is not None else []
        redelivered = table.where("redelivered").count() if table is not None else 0
        labels = sum(1 for c in confirms if c.wait_acks(timeout=0.0).ok)
        progress.update(t_written, completed=len(ids))
        # After spark.stop() the source runner is gone: nothing of this queue is unacked any more.
        spark.stop()
        left, settled_by = _remaining(conn, queue)
        settled = len(confirmed) - left
        progress.update(t_settled, completed=settled)
        _cleanup(Console(stderr=True), conn, queue, keep=keep)

    unique = set(ids)
    lost = len(set(confirmed) - unique)
    # Rows of (what, count): fits 80 columns, no header is ever cut.
    _summary(
        console,
        {"published": messages, "confirmed": len(confirmed), "written": len(ids), "settled": settled,
         "redelivered": redelivered, "duplicates": len(ids) - len(unique),
         "lost": f"[{'red' if lost else 'green'}]{lost}[/]", "spark-committed acks": labels},
        f"ackbridge demo: {shown} -> Spark -> Parquet ({time.monotonic() - started:.1f} s)")
    console.print(f"table: {table_path}   stale settlements refused: {stats.get('stale_refused', 0)}")
    console.print(f"settled = confirmed - {settled_by}")
    if error is not None:
        console.print(f"[red]query failed:[/] {error}")
    if lost or error is not None:
        raise typer.Exit(1)


def _summary(console: Console, counts: dict[str, Any], title: str) -> None:
    """*counts* as rows of (what, count): fits 80 columns, no header is ever cut."""
    from rich.table import Table

    console.print(f"[bold]{title}[/bold]")
    table = Table()
    table.add_column("what", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    for name, value in counts.items():
        table.add_row(name, str(value))
    console.print(table)


def _cleanup(err: Console, conn: Connection, queue: str, *, keep: bool) -> None:
    """Delete the demo's *queue* (and its dead-letter companion) unless *keep*; say so
    (on *err*) where the broker cannot delete it."""
    if keep:
        err.print(f"[yellow]warning:[/yellow] queue {queue!r} (and its dead-letter companion) is kept (--keep)")
        return
    try:
        conn.delete_queue(queue, dead_letter=True)
    except UnsupportedVerbError as exc:
        err.print(f"[yellow]warning:[/yellow] {redact(f'queue {queue!r} stays on the broker: {exc}')}")


def _remaining(conn: Connection, queue: str) -> tuple[int, str]:
    """Messages of *queue* the broker still holds, and how that was found.

    A broker that tells both its ready and its unacked count (``inspect_queue``: the
    embedded one) is asked. Others tell no exact depth, so a fresh consumer takes what
    is left until the queue has been quiet for 2 s, settles none of it, and closes:
    the broker keeps those messages (redelivered).
    """
    try:
        info = conn.inspect_queue(queue)
    except AckbridgeError:  # UnsupportedVerbError: the broker tells nothing
        info = None
    if info is not None and info.messages is not None and info.unacked is not None:
        return info.messages + info.unacked, "what the broker still holds (inspect_queue)"
    consumer = conn.consume(queue, prefetch=1000)
    found = 0
    try:
        while consumer.get(timeout=2.0) is not None:
            found += 1
    finally:
        consumer.close()
    return found, "what a fresh consumer still found on the queue"
