"""Instructions per message, counted by valgrind: the benchmarks' work with most of the machine's noise taken out.

Timed ratios on a shared 2-core VM move by 10% or more between runs of identical
code (docs/benchmarks.md). Valgrind's callgrind counts the instructions a process
executes, which the machine's other work does not change (except through timing
where threads meet: below). Each side of each row (the raw client, or ackbridge)
runs in a child process under callgrind at two message counts; the difference in
instructions over the difference in messages is the cost per message, with
interpreter start-up and imports cancelled out. Filling a queue for a consume row
happens in this parent process and is not counted.

    ratio = raw client's instructions per message / ackbridge's

so it reads like the timed benchmarks' throughput ratios (above 1: ackbridge does
less work per message than the raw client).

Where threads meet (a broker's I/O thread and the caller's), how many messages
each wake-up carries depends on timing, and so does the count: the rows of the
core and the broker groups move by up to a few percent between runs (raw pika's
publish loop by up to a quarter). The ``engine`` rows are exact: one thread and
the example plugin's in-process transport, which confirms and delivers at once,
so the count is the same in every run and the difference between the sides is
the core's own work per message. Instructions are not seconds: waiting (fsync,
the broker, the network) and the kernel's work cost none, and a cache miss counts
as one instruction.

    .venv/bin/python benchmarks/instructions.py [--rows engine,core,rabbitmq,mqtt,amqp10,nats,streams]
        [--only "receive, asyncio"] [--n1 2000 --n2 6000]

Before/after a change: run this script from each checkout's virtualenv
(``/other/.venv/bin/python benchmarks/instructions.py``); the benchmark functions
it drives use the public API and the transport contract both sides share.
``--bench-dir`` takes them from another folder instead. The AMQP 1.0 rows need
RabbitMQ's management and AMQP 1.0 plugins (``scripts/brokers.sh``), the streams rows
its stream plugin (port 5552); their raw side is rstream's Producer and Consumer
(``cpu_raw_sides.py``), one for both faces as in ``cpu_per_message.py``.
Needs ``valgrind`` (Debian's package of that name).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

BODY = b"x" * 256
CORE_OPTIONS = {"lease_timeout": 30.0, "fsync": True, "max_message_bytes": 16 << 20, "poll_ms": 20.0}
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


@dataclass(frozen=True)
class Row:
    """One benchmark row: its two sides, and what the parent prepares (uncounted) for a count of n."""

    group: str
    name: str
    raw: str
    ackbridge: str
    prepare: Callable[[dict[str, Any], int], None] | None = None


def _core(side: str, n: int, ctx: dict[str, Any]) -> None:
    import core_bench as cb

    import ackbridge
    url, queue = ctx["url"], ctx["queue"]
    if side.startswith("direct"):
        transport, events = cb.open_direct(url, CORE_OPTIONS)
        if side == "direct_publish":
            cb.direct_publish(transport, events, queue, n, 1000)
        else:
            cb.direct_consume(transport, events, queue, n, 500, inline=side == "direct_inline")
        transport.close()
        return
    with ackbridge.connect(url) as conn:
        {"core_publish": lambda: cb.core_publish(conn, queue, n, 1000),
         "core_get": lambda: cb.core_consume(conn, queue, n, 500),
         "core_handler": lambda: cb.core_consume_handler(conn, queue, n, 500)}[side]()


def _memory_transport_module() -> Any:
    """The example plugin's in-process transport, from the checkout ackbridge runs from."""
    import importlib.util
    from pathlib import Path

    import ackbridge
    path = Path(ackbridge.__file__).parents[1] / "examples/ackbridge-memory-plugin/ackbridge_memory/__init__.py"
    spec = importlib.util.spec_from_file_location("ackbridge_memory", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ackbridge_memory"] = module
    spec.loader.exec_module(module)
    return module


class _Collect:
    """The raw side's transport events: count confirms, keep deliveries."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.delivered: list[Any] = []

    def confirm(self, seq: int, outcome: Any) -> None:
        self.confirmed += 1

    def confirm_batch(self, outcomes: Any) -> None:
        self.confirmed += len(outcomes)

    def deliver(self, subscription: str, message: Any) -> None:
        self.delivered.append(message)


def _engine(side: str, n: int, ctx: dict[str, Any]) -> None:
    """One thread, an in-process transport that confirms and delivers at once: only the
    core's own work differs between the sides, and the count is the same every run."""
    import ackbridge
    from ackbridge.messages import OutboundMessage, WireSettle, WireVerb
    from ackbridge.plugins import registry
    from ackbridge.urls import parse_url
    memory = _memory_transport_module()
    if side.startswith("raw"):
        events = _Collect()
        transport = memory.MemoryTransport(parse_url("memory://bench"), {}, events)
        for seq in range(1, n + 1):
            transport.publish(seq, "q", OutboundMessage(BODY, message_id=str(seq)))
        assert events.confirmed == n
        if side == "raw_roundtrip":
            transport.subscribe("s", "q", prefetch=n)
            for message in events.delivered:
                transport.settle([WireSettle(WireVerb.ACK, message.wire_tag, message.generation, "s", False, message)])
        return
    registry().add_entry_point("memory", "ackbridge_memory", memory)
    with ackbridge.connect("memory://bench") as conn:
        publisher = conn.publisher(window=1000)
        for i in range(n):
            publisher.publish("q", BODY, message_id=str(i))
        assert publisher.flush(timeout=10)
        if side == "ab_roundtrip":
            consumer = conn.consume("q", prefetch=n)
            for _ in range(n):
                delivery = consumer.get(timeout=10)
                assert delivery is not None
                delivery.ack()


def _rabbitmq(side: str, n: int, ctx: dict[str, Any]) -> None:
    import rabbitmq_bench as rb
    {"raw_publish": lambda: rb.raw_publish(ctx["queue"], n, 1000),
     "ab_publish": lambda: rb.ab_publish(ctx["queue"], n, 1000),
     "raw_consume": lambda: rb.raw_consume(ctx["queue"], n, 1000, 100),
     "ab_consume": lambda: rb.ab_consume(ctx["queue"], n, 1000, 100)}[side]()


def _mqtt(side: str, n: int, ctx: dict[str, Any]) -> None:
    import mqtt_bench as mb

    from ackbridge_mqtt.sessions import derived_session_id
    # The parent filled the session already: the child only consumes.
    mb._fill = lambda topic, m, port: derived_session_id(topic)
    topic, port = ctx["topic"], ctx.get("port", mb.PORT)
    {"raw_publish": lambda: mb.raw_publish(n, topic),
     "ab_publish": lambda: mb.ab_publish(n, topic),
     "raw_consume": lambda: mb.raw_consume(n, topic, port),
     "ab_consume": lambda: mb.ab_consume(n, topic, port),
     "ab_consume_handler": lambda: mb.ab_consume_handler(n, topic, port)}[side]()


def _amqp10(side: str, n: int, ctx: dict[str, Any]) -> None:
    import asyncio

    import amqp10_bench as ab
    import cpu_ackbridge_sides as sides
    import cpu_raw_proton_asyncio as raw_proton_asyncio
    address = ctx["address"]
    url = f"amqp10://guest:guest@{ab.HOST}:{ab.PORT}"
    {"raw_send": lambda: ab.raw_send(address, n, BODY),
     "ab_receive_async": lambda: asyncio.run(sides.consume_async(url, address, n, 200)),
     "ab_send": lambda: ab.ab_send(address, n, BODY, 65536),
     "ab_send_1000": lambda: ab.ab_send(address, n, BODY, 1000),
     "raw_receive": lambda: ab.raw_receive(address, n, 200),
     "raw_receive_asyncio": lambda: asyncio.run(raw_proton_asyncio.receive(address, n, 200)),
     "ab_receive": lambda: ab.ab_receive(address, n, 200),
     "ab_receive_handler": lambda: ab.ab_receive_handler(address, n, 200)}[side]()


def _nats(side: str, n: int, ctx: dict[str, Any]) -> None:
    import asyncio

    import cpu_ackbridge_sides as ab
    import cpu_raw_sides as raw
    import nats
    import nats_bench as nb
    subject = ctx["subject"]  # filled by the parent

    async def raw_consume() -> None:
        nc = await nats.connect(nb.URL)
        try:
            await raw.nats_pull_drain(nc, subject, n)
        finally:
            await nc.close()

    def raw_consume_on_thread() -> None:
        import threading
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        nc = asyncio.run_coroutine_threadsafe(nats.connect(nb.URL), loop).result()
        try:
            raw.nats_pull_drain_on_thread(loop, nc, subject, n)
        finally:
            asyncio.run_coroutine_threadsafe(nc.close(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    {"raw_consume": lambda: asyncio.run(raw_consume()),
     "raw_consume_on_thread": raw_consume_on_thread,
     "ab_consume": lambda: ab.consume(nb.URL, subject, n, nb.PREFETCH),
     "ab_consume_async": lambda: asyncio.run(ab.consume_async(nb.URL, subject, n, nb.PREFETCH))}[side]()


def _streams(side: str, n: int, ctx: dict[str, Any]) -> None:
    import asyncio

    import cpu_ackbridge_sides as ab
    import cpu_raw_sides as raw
    url, stream = f"rabbitmq-stream://guest:guest@{raw.STREAM_HOST}:{raw.STREAM_PORT}/", ctx["stream"]
    {"raw_publish": lambda: asyncio.run(raw.rstream_publish(stream, n, 1000)),
     "ab_publish": lambda: ab.publish(url, stream, n, 1000, BODY),
     "ab_publish_async": lambda: asyncio.run(ab.publish_async(url, stream, n, 1000, BODY)),
     "raw_consume": lambda: asyncio.run(raw.rstream_consume(stream, n)),
     "ab_consume": lambda: ab.consume(url, stream, n, 1000),
     "ab_consume_async": lambda: asyncio.run(ab.consume_async(url, stream, n, 1000))}[side]()


CHILDREN: dict[str, Callable[[str, int, dict[str, Any]], None]] = {
    "engine": _engine, "core": _core, "rabbitmq": _rabbitmq, "mqtt": _mqtt, "amqp10": _amqp10, "nats": _nats,
    "streams": _streams}


def _core_queue(ctx: dict[str, Any], n: int) -> None:
    ctx["queue"] = f"instr-{uuid.uuid4().hex[:8]}"


def _core_fill(ctx: dict[str, Any], n: int) -> None:
    import core_bench as cb
    _core_queue(ctx, n)
    transport, events = cb.open_direct(ctx["url"], CORE_OPTIONS)
    cb.direct_publish(transport, events, ctx["queue"], n, 1000)
    transport.close()


def _rabbitmq_empty(ctx: dict[str, Any], n: int) -> None:
    import rabbitmq_bench as rb
    rb.purge(ctx["queue"])


def _rabbitmq_fill(ctx: dict[str, Any], n: int) -> None:
    import rabbitmq_bench as rb
    rb.purge(ctx["queue"])
    rb.fill(ctx["queue"], n)


def _mqtt_fill(ctx: dict[str, Any], n: int) -> None:
    import mqtt_bench as mb
    ctx["topic"] = f"bench/{uuid.uuid4().hex[:8]}/q"
    mb._fill(ctx["topic"], n, ctx["port"])


def _mqtt_topic(ctx: dict[str, Any], n: int) -> None:
    ctx["topic"] = f"bench/{uuid.uuid4().hex[:8]}/nosub"


def _nats_fill(ctx: dict[str, Any], n: int) -> None:
    import nats_bench as nb
    filler = _NATS[0]
    ctx["subject"] = filler.run(nb._new_queue(filler.nc))
    filler.made.append(ctx["subject"])
    filler.run(nb._fill(filler.nc, ctx["subject"], n))


def _amqp10_empty(ctx: dict[str, Any], n: int) -> None:
    import amqp10_bench as ab
    ab._mgmt("DELETE", ctx["queue"], suffix="/contents")


def _amqp10_fill(ctx: dict[str, Any], n: int) -> None:
    import amqp10_bench as ab
    _amqp10_empty(ctx, n)
    ab.raw_send(ctx["address"], n, BODY)


#: The streams the streams group made, dropped when the group ends.
_STREAMS_MADE: list[str] = []


def _streams_new(ctx: dict[str, Any], n: int) -> None:
    import asyncio

    from cpu_rows import _create_stream
    ctx["stream"] = f"ab-instr-{uuid.uuid4().hex[:8]}"
    _STREAMS_MADE.append(ctx["stream"])
    asyncio.run(_create_stream(ctx["stream"]))


def _streams_fill(ctx: dict[str, Any], n: int) -> None:
    import spark_stream_bench as ssb
    ctx["stream"] = f"ab-instr-{uuid.uuid4().hex[:8]}"
    _STREAMS_MADE.append(ctx["stream"])
    ssb.fill([ctx["stream"]], n, len(BODY))


ROWS = [
    Row("engine", "publish with confirms", "raw_publish", "ab_publish"),
    Row("engine", "publish, then get() and ack", "raw_roundtrip", "ab_roundtrip"),
    Row("core", "publish with confirms", "direct_publish", "core_publish", _core_queue),
    Row("core", "consume, per-message ack, get()", "direct_consume", "core_get", _core_fill),
    Row("core", "consume, per-message ack, handler", "direct_consume", "core_handler", _core_fill),
    Row("core", "  (raw settling inline, as a handler)", "direct_inline", "core_handler", _core_fill),
    Row("rabbitmq", "publish + confirms", "raw_publish", "ab_publish", _rabbitmq_empty),
    Row("rabbitmq", "consume, conflated acks", "raw_consume", "ab_consume", _rabbitmq_fill),
    Row("mqtt", "publish + confirm", "raw_publish", "ab_publish", _mqtt_topic),
    Row("mqtt", "consume, handler", "raw_consume", "ab_consume_handler", _mqtt_fill),
    Row("mqtt", "consume, get()", "raw_consume", "ab_consume", _mqtt_fill),
    Row("amqp10", "send + settlement", "raw_send", "ab_send", _amqp10_empty),
    Row("amqp10", "send, window 1000", "raw_send", "ab_send_1000", _amqp10_empty),
    Row("amqp10", "receive, handler", "raw_receive", "ab_receive_handler", _amqp10_fill),
    Row("amqp10", "receive, get()", "raw_receive", "ab_receive", _amqp10_fill),
    Row("amqp10", "receive, asyncio", "raw_receive_asyncio", "ab_receive_async", _amqp10_fill),
    Row("amqp10", "receive, asyncio (raw on one thread)", "raw_receive", "ab_receive_async", _amqp10_fill),
    Row("nats", "consume + ack, get() (sync)", "raw_consume_on_thread", "ab_consume", _nats_fill),
    Row("nats", "consume + ack, get() (sync, raw on one thread)", "raw_consume", "ab_consume", _nats_fill),
    Row("nats", "consume + ack, get() (asyncio)", "raw_consume", "ab_consume_async", _nats_fill),
    Row("streams", "publish + confirms", "raw_publish", "ab_publish", _streams_new),
    Row("streams", "publish + confirms, asyncio", "raw_publish", "ab_publish_async", _streams_new),
    Row("streams", "consume + ack, get()", "raw_consume", "ab_consume", _streams_fill),
    Row("streams", "consume + ack, asyncio", "raw_consume", "ab_consume_async", _streams_fill),
]


class _NatsFiller:
    """A raw nats-py client on a loop of its own thread: fills the NATS rows' queues (uncounted)."""

    def __enter__(self) -> _NatsFiller:
        import asyncio
        import threading

        import nats
        import nats_bench as nb
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self.run(nats.connect(nb.URL))
        #: Subjects of the queues made, deleted on exit.
        self.made: list[str] = []
        return self

    def run(self, coro: Any) -> Any:
        import asyncio
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)

    def __exit__(self, *exc: object) -> None:
        from ackbridge_nats.naming import stream_name
        for subject in self.made:
            with contextlib.suppress(Exception):
                self.run(self.nc.jsm().delete_stream(stream_name(subject)))
        with contextlib.suppress(Exception):
            self.run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


#: The NATS group's filler while its rows run (the rows' prepare functions reach it here).
_NATS: list[_NatsFiller] = []


@contextlib.contextmanager
def _group_context(group: str) -> Iterator[dict[str, Any]]:
    """What a group's rows share: a queue, a private Mosquitto, an AMQP 1.0 address."""
    if group == "rabbitmq":
        import rabbitmq_bench as rb
        queue = f"ab-instr-{uuid.uuid4().hex[:8]}"
        rb.declare(queue)
        try:
            yield {"queue": queue}
        finally:
            rb.delete(queue)
    elif group == "mqtt":
        import mqtt_bench as mb
        with mb.private_mosquitto() as port:  # an unlimited queue for the backlog
            yield {"port": port}
    elif group == "amqp10":
        import amqp10_bench as ab
        queue = f"ab10-instr-{uuid.uuid4().hex[:8]}"
        ab._mgmt("PUT", queue, {"durable": True, "auto_delete": False, "arguments": {}})
        try:
            yield {"queue": queue, "address": f"/amq/queue/{queue}"}
        finally:
            ab._mgmt("DELETE", queue)
    elif group == "nats":
        with _NatsFiller() as filler:  # a raw client fills each child's queue
            _NATS[:] = [filler]
            try:
                yield {}  # the child gets the subject only: ctx travels as JSON
            finally:
                _NATS.clear()
    elif group == "streams":
        import spark_stream_bench as ssb
        try:
            yield {}
        finally:
            ssb.drop_streams(_STREAMS_MADE)
            _STREAMS_MADE.clear()
    elif group == "core":
        with tempfile.TemporaryDirectory() as tmp:  # one embedded broker file for the group
            yield {"url": f"local://{tmp}/bench.db"}
    else:
        yield {}  # engine: each child makes its own in-process broker


def count(bench_dir: str, group: str, side: str, n: int, ctx: dict[str, Any]) -> int:
    """Instructions of one child process doing *n* messages of one side, every thread counted."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, os.path.abspath(__file__), "--bench-dir", bench_dir,
               "--child", json.dumps([group, side, n, ctx])]
    # A fixed hash seed: str hashes (dict and set layouts) the same in every child.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False, env=env)
    found = _IREFS.findall(done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{group}/{side} n={n} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found[-1].replace(",", ""))


def per_message(bench_dir: str, row: Row, side: str, n1: int, n2: int, ctx: dict[str, Any]) -> float:
    counts = []
    for n in (n1, n2):
        if row.prepare is not None:
            row.prepare(ctx, n)
        print(f"  counting {row.group}/{side}, {n} messages", file=sys.stderr, flush=True)  # minutes each
        counts.append(count(bench_dir, row.group, side, n, ctx))
    return (counts[1] - counts[0]) / (n2 - n1)


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="engine,core,rabbitmq,mqtt,amqp10,nats,streams",
                        help="groups to count, comma-separated")
    parser.add_argument("--only", default="", help="count only the rows whose name contains this")
    parser.add_argument("--n1", type=int, default=2000)
    parser.add_argument("--n2", type=int, default=6000)
    parser.add_argument("--bench-dir", default=here, help="import the benchmark modules from this folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, args.bench_dir)
    if args.child:
        group, side, n, ctx = json.loads(args.child)
        CHILDREN[group](side, n, ctx)
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    groups = args.rows.split(",")
    unknown = [g for g in groups if g not in CHILDREN]
    if unknown:
        parser.error(f"unknown row group(s) {', '.join(unknown)}; known: {', '.join(CHILDREN)}")
    if args.n2 <= args.n1:
        parser.error("--n2 must be larger than --n1")
    print(f"instructions per message (callgrind, every thread of the client process), "
          f"n = {args.n2} - {args.n1}; benchmarks from {args.bench_dir}")
    print(f"{'row':44} {'raw client':>12} {'ackbridge':>12} {'ratio':>7}")
    for group in groups:
        with _group_context(group) as ctx:
            for row in (r for r in ROWS if r.group == group and args.only in r.name):
                raw = per_message(args.bench_dir, row, row.raw, args.n1, args.n2, ctx)
                ours = per_message(args.bench_dir, row, row.ackbridge, args.n1, args.n2, ctx)
                print(f"{group + ': ' + row.name:44} {raw:12,.0f} {ours:12,.0f} {raw / ours:7.3f}", flush=True)


if __name__ == "__main__":
    main()
