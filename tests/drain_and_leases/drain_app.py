"""The service that ``test_drain_on_sigterm`` stops with SIGTERM: run as a child process.

``python drain_app.py URL QUEUE OUTDIR FACE PREFETCH WORK_MS OPTIONS_JSON``

A handler consumer (FACE ``sync`` or ``async``) whose handler works WORK_MS per
delivery, appends the id to ``OUTDIR/processed`` (flushed and fsynced) and acks.
The id it is working on is in ``OUTDIR/started`` while it works. SIGTERM starts
``consumer.drain()`` the documented way (the main thread waits for the signal and
drains; asyncio: ``loop.add_signal_handler``); ``OUTDIR/status.json`` then holds the
drain's result and the id that was being worked on when the signal came.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ackbridge

#: The drain's deadline: far above WORK_MS, so a delivery in flight always finishes.
DRAIN_TIMEOUT_S = 30.0


class App:
    def __init__(self, outdir: Path, work_ms: float) -> None:
        self.outdir = outdir
        self.work_s = work_ms / 1000
        self.started: str | None = None
        self.processed = open(outdir / "processed", "a", encoding="utf-8")

    def begin(self, message_id: str) -> None:
        self.started = message_id

    def done(self, message_id: str) -> None:
        self.processed.write(message_id + "\n")
        self.processed.flush()
        os.fsync(self.processed.fileno())
        self.started = None

    def status(self, result: Any, in_flight: str | None) -> None:
        (self.outdir / "status.json").write_text(json.dumps({
            "handed_back": result.handed_back, "finished": result.finished, "abandoned": result.abandoned,
            "in_flight_at_signal": in_flight, "ackbridge": ackbridge.__file__}))


def run_sync(app: App, url: str, queue: str, prefetch: int, options: dict[str, Any]) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def handler(delivery: ackbridge.Delivery) -> None:
        message_id = delivery.body.decode()
        app.begin(message_id)
        time.sleep(app.work_s)
        app.done(message_id)
        delivery.ack()

    with ackbridge.connect(url, prefetch=prefetch, reconnect=False, **options) as conn:
        consumer = conn.consume(queue, handler=handler)
        (app.outdir / "ready").write_text("")
        stop.wait()
        in_flight = app.started
        app.status(consumer.drain(timeout=DRAIN_TIMEOUT_S), in_flight)


async def run_async(app: App, url: str, queue: str, prefetch: int, options: dict[str, Any]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def handler(delivery: ackbridge.AsyncDelivery) -> None:
        message_id = delivery.body.decode()
        app.begin(message_id)
        await asyncio.sleep(app.work_s)
        app.done(message_id)
        await delivery.ack()

    async with await ackbridge.connect_async(url, prefetch=prefetch, reconnect=False, **options) as conn:
        consumer = await conn.consume(queue, handler=handler)
        (app.outdir / "ready").write_text("")
        await stop.wait()
        in_flight = app.started
        app.status(await consumer.drain(timeout=DRAIN_TIMEOUT_S), in_flight)


def main(argv: list[str]) -> None:
    url, queue, outdir, face, prefetch, work_ms, options = argv
    app = App(Path(outdir), float(work_ms))
    if face == "sync":
        run_sync(app, url, queue, int(prefetch), json.loads(options))
    else:
        asyncio.run(run_async(app, url, queue, int(prefetch), json.loads(options)))


if __name__ == "__main__":
    main(sys.argv[1:])
