"""The application that ``test_shutdown_signals`` stops: run as a child process.

``python signal_app.py URL QUEUE OUTDIR VARIANT PREFETCH WORK_MS HOLD_AT``

It consumes QUEUE the way the README shows (``for delivery in consumer: with
delivery.process(): work(delivery)``, or the asyncio twin) and appends each id to
``OUTDIR/processed`` (flushed and fsynced) after its work, inside the process()
block. At the HOLD_AT-th delivery the work holds: it writes ``OUTDIR/holding``
and sleeps until the test stops it (a signal), so the interruption always lands
inside process(), with the rest of the prefetched deliveries unsettled. The
``*-exit-in-work`` variants raise ``SystemExit`` there instead. On the way out
``OUTDIR/status.json`` says what stopped it, which id was in flight and which
ackbridge it imported (the fixed one, or the old one through PYTHONPATH).

Run by path (not as ``tests.…``): the child imports whichever ackbridge its
PYTHONPATH names first, nothing from this repository's tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import ackbridge

#: The longest the work holds waiting for the signal before it goes on (the test then fails).
HOLD_S = 30.0

SYNC_VARIANTS = ("sync-sigint", "sync-sigterm-exit", "sync-sigterm-default", "sync-exit-in-work")
ASYNC_VARIANTS = ("async-sigint", "async-sigterm-cancel", "async-exit-in-work")


class App:
    def __init__(self, outdir: Path, variant: str, work_ms: float, hold_at: int) -> None:
        self.outdir = outdir
        self.variant = variant
        self.work_s = work_ms / 1000
        self.hold_at = hold_at
        self.seen = 0
        self.in_flight: str | None = None
        self.processed = open(outdir / "processed", "a", encoding="utf-8")

    def begin(self, message_id: str) -> bool:
        """Count a delivery; True when this one is the one to hold (or exit) at."""
        self.in_flight = message_id
        self.seen += 1
        if self.seen != self.hold_at:
            return False
        if self.variant.endswith("exit-in-work"):
            raise SystemExit(3)
        (self.outdir / "holding").write_text(message_id)
        return True

    def done(self, message_id: str) -> None:
        self.processed.write(message_id + "\n")
        self.processed.flush()
        os.fsync(self.processed.fileno())
        self.in_flight = None

    def status(self, stopped_by: BaseException | None) -> None:
        (self.outdir / "status.json").write_text(json.dumps({
            "stopped_by": None if stopped_by is None else type(stopped_by).__name__,
            "in_flight": self.in_flight, "seen": self.seen, "ackbridge": ackbridge.__file__}))


def run_sync(app: App, url: str, queue: str, prefetch: int) -> None:
    if app.variant == "sync-sigterm-exit":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def work(delivery: ackbridge.Delivery) -> None:
        message_id = delivery.body.decode()
        if app.begin(message_id):
            end = time.monotonic() + HOLD_S
            while time.monotonic() < end:
                time.sleep(0.01)
        time.sleep(app.work_s)
        app.done(message_id)

    try:
        with ackbridge.connect(url, prefetch=prefetch, reconnect=False) as conn:
            consumer = conn.consume(queue)
            for delivery in consumer:
                with delivery.process():
                    work(delivery)
    except BaseException as exc:
        app.status(exc)
        raise
    app.status(None)


async def run_async(app: App, url: str, queue: str, prefetch: int) -> None:
    async def work(delivery: ackbridge.AsyncDelivery) -> None:
        message_id = delivery.body.decode()
        if app.begin(message_id):
            end = time.monotonic() + HOLD_S
            while time.monotonic() < end:
                await asyncio.sleep(0.01)
        await asyncio.sleep(app.work_s)
        app.done(message_id)

    async def consume() -> None:
        async with await ackbridge.connect_async(url, prefetch=prefetch, reconnect=False) as conn:
            consumer = await conn.consume(queue)
            async for delivery in consumer:
                async with delivery.process():
                    await work(delivery)

    try:
        if app.variant == "async-sigterm-cancel":
            # The usual service shape: SIGTERM cancels the consuming task, main returns.
            task = asyncio.get_running_loop().create_task(consume())
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
                app.status(asyncio.CancelledError())
                return
        else:
            await consume()  # async-sigint: asyncio.run cancels this (main) task on Ctrl-C
    except BaseException as exc:
        app.status(exc)
        raise
    app.status(None)


def main(argv: list[str]) -> None:
    url, queue, outdir, variant, prefetch, work_ms, hold_at = argv
    app = App(Path(outdir), variant, float(work_ms), int(hold_at))
    if variant in SYNC_VARIANTS:
        run_sync(app, url, queue, int(prefetch))
    elif variant in ASYNC_VARIANTS:
        asyncio.run(run_async(app, url, queue, int(prefetch)))
    else:
        raise SystemExit(f"unknown variant {variant!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
