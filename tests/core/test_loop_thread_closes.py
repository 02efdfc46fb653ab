"""A LoopThread's loop is closed when it stops, whoever stops it: the caller after the
join, or the loop's own thread when stop() was called from the loop (where joining would
deadlock). A loop left open holds its selector's socket pair until a garbage collection
(seen as 'unclosed event loop' and two unclosed AF_UNIX sockets in the suite), and a
transport closed in the loop's last turn finished closing in a turn that never came."""

from __future__ import annotations

import asyncio
import socket

from ackbridge.transport.loop_thread import LoopThread


def test_stop_from_the_caller_closes_the_loop() -> None:
    runner = LoopThread("test-loop")
    runner.run(asyncio.sleep(0), timeout=5)
    runner.stop()
    assert runner.loop.is_closed()


def test_stop_from_the_loop_itself_closes_the_loop_once_it_ends() -> None:
    runner = LoopThread("test-loop")

    async def stop_from_inside() -> None:
        runner.stop()

    runner.run(stop_from_inside(), timeout=5)
    runner.thread.join(5)
    assert not runner.thread.is_alive()
    assert runner.loop.is_closed()


def test_a_transport_closed_in_the_stopping_turn_closes_its_socket() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    runner = LoopThread("test-loop")
    writer = runner.run(asyncio.open_connection(*server.getsockname()), timeout=5)[1]
    peer = server.accept()[0]
    transport_socket = writer.get_extra_info("socket")

    async def close_and_stop() -> None:
        # The worst order: stop() first, then a callback in the same turn as the stop closes
        # the transport, which finishes closing its socket one turn later.
        runner.stop()
        runner.loop.call_soon(writer.close)

    try:
        runner.run(close_and_stop(), timeout=5)
        runner.thread.join(5)
        assert runner.loop.is_closed()
        assert transport_socket.fileno() == -1, "the transport's socket is still open after the loop stopped"
    finally:
        peer.close()
        server.close()


def test_a_task_left_pending_is_cancelled_when_the_loop_stops() -> None:
    """A task still waiting when the loop stops (a client whose close did not finish) is
    cancelled and unwound before the loop closes, not left for the garbage collector."""
    import asyncio

    from ackbridge.transport.loop_thread import LoopThread

    thread = LoopThread("ab-test-leftover")
    unwound = []
    tasks: list[asyncio.Task[None]] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            unwound.append(True)

    async def spawn() -> None:
        tasks.append(asyncio.get_running_loop().create_task(forever()))
        await asyncio.sleep(0)

    thread.run(spawn(), 5)
    thread.stop()
    assert thread.loop.is_closed()
    assert tasks[0].cancelled() and unwound == [True]
