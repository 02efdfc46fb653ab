"""A loopback TCP proxy for fault injection: reset, blackhole, cut mid-frame, latency.

It runs an asyncio loop on its own thread; every control method is
thread-safe and returns once the fault is in force. Listens and connects on
127.0.0.1 only. Point a client at ``proxy.port`` instead of the broker's port.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

#: How long one direction may stay open after the other closed cleanly before a reset.
_HALF_CLOSED_S = 5.0


@dataclass
class _Pair:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    #: Directions whose sender closed cleanly (its FIN forwarded as a FIN).
    ended: int = 0


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        if target_host not in {"127.0.0.1", "localhost", "::1"}:
            raise ValueError("the fault proxy only forwards to loopback")
        self.target = (target_host, target_port)
        self.port = 0
        self.latency_s = 0.0
        self.connections_seen = 0
        self.bytes_to_target = 0  # forwarded client -> target, all connections together
        self._blackhole = False
        self._hold_replies = False
        self._cut_after: int | None = None
        self._reset_budget: int | None = None
        self._pairs: list[_Pair] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")

    # ---- control (any thread) -------------------------------------------------
    def reset(self) -> None:
        """Abort every proxied connection with a TCP RST (new ones are accepted)."""
        self._call(self._reset_all)

    def blackhole(self, on: bool = True) -> None:
        """Stop (or resume) forwarding in both directions; sockets stay open."""
        self._blackhole = on

    @contextlib.contextmanager
    def blackholed(self) -> Iterator[None]:
        self.blackhole(True)
        try:
            yield
        finally:
            self.blackhole(False)

    @contextlib.contextmanager
    def held_replies(self) -> Iterator[None]:
        """Forward the client's bytes but hold the broker's (e.g. publish confirms)
        until the block ends; a reset inside the block drops them."""
        self._hold_replies = True
        try:
            yield
        finally:
            self._hold_replies = False

    @property
    def replies_held(self) -> bool:
        return self._hold_replies

    def cut_mid_frame(self, after_bytes: int = 3) -> None:
        """Forward only *after_bytes* of the next chunk (either way), then reset."""
        self._cut_after = after_bytes

    def reset_after(self, client_bytes: int) -> None:
        """Forward *client_bytes* more bytes towards the target (all connections
        together), then reset every connection: a cut in the middle of a write."""
        self._reset_budget = client_bytes

    def upstream_ports(self) -> list[int]:
        """Local ports of the live proxy -> target sockets (what the broker sees as peer ports)."""
        ports = []
        for pair in list(self._pairs):
            sockname = pair.upstream.get_extra_info("sockname")
            if sockname:
                ports.append(int(sockname[1]))
        return ports

    def set_latency(self, seconds: float) -> None:
        self.latency_s = seconds

    def close(self) -> None:
        self._call(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- loop side -----------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        # Stopped by close(): finish what the loop still runs, then close it (an event loop
        # left open is reported as an unclosed socket pair when it is collected).
        left = asyncio.all_tasks(self._loop)
        for task in left:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def _call(self, fn: object) -> None:
        async def run() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_seen += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        pair = _Pair(writer, up_writer)
        self._pairs.append(pair)
        pair.tasks = [
            asyncio.ensure_future(self._pump(reader, up_writer, pair, from_target=False)),
            asyncio.ensure_future(self._pump(up_reader, writer, pair, from_target=True)),
        ]

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, pair: _Pair, *,
                    from_target: bool) -> None:
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    self._forward_eof(dst, pair)
                    return  # the pair lives until the other direction closes too
                while self._blackhole or (from_target and self._hold_replies):
                    if pair not in self._pairs:
                        return  # reset while held: the held bytes are dropped
                    await asyncio.sleep(0.02)
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                if self._cut_after is not None:
                    cut, self._cut_after = self._cut_after, None
                    dst.write(data[:cut])
                    with contextlib.suppress(OSError, ConnectionError):
                        await dst.drain()
                    self._abort_pair(pair)
                    return
                if not from_target and self._reset_budget is not None:
                    budget = self._reset_budget
                    self._reset_budget = budget - len(data)
                    if self._reset_budget <= 0:
                        self._reset_budget = None
                        dst.write(data[:budget])
                        with contextlib.suppress(OSError, ConnectionError):
                            await dst.drain()
                        self._reset_all()
                        return
                dst.write(data)
                if not from_target:
                    self.bytes_to_target += len(data)
                await dst.drain()
        except (OSError, ConnectionError, asyncio.CancelledError):
            pass
        self._abort_pair(pair)

    def _forward_eof(self, dst: asyncio.StreamWriter, pair: _Pair) -> None:
        # A peer's own close is passed on as a close (FIN), not a reset: a reset makes the
        # receiving kernel drop bytes it has not yet handed to the application, so the tail
        # of what a client wrote just before closing would never reach the broker. Faults
        # (reset, cut_mid_frame, reset_after) abort on purpose; this is the peer's choice.
        with contextlib.suppress(OSError, ConnectionError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()
        pair.ended += 1
        if pair.ended == 2:
            self._close_pair(pair)
            return
        # The other side normally closes in answer; one that never does is reset.
        self._loop.call_later(_HALF_CLOSED_S, self._abort_pair, pair)

    def _close_pair(self, pair: _Pair) -> None:
        if pair in self._pairs:
            self._pairs.remove(pair)
        for writer in (pair.client, pair.upstream):
            with contextlib.suppress(Exception):
                writer.close()

    def _abort_pair(self, pair: _Pair) -> None:
        _abort(pair.client)
        _abort(pair.upstream)
        if pair in self._pairs:
            self._pairs.remove(pair)

    def _reset_all(self) -> None:
        for pair in list(self._pairs):
            self._abort_pair(pair)

    def _shutdown(self) -> None:
        self._server.close()
        self._reset_all()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer or middlebox would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
