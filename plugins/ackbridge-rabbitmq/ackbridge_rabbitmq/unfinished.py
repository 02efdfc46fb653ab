"""Closing the socket of a connection pika had not finished opening when the transport closed.

Stopping pika's I/O loop closes no socket, and pika 1.4.4 cannot abort a connection in
its AMQP handshake: ``Connection.close()`` then ends in an AssertionError on the loop
(``connection_workflow.py`` hands the exception *class* ``AMQPConnectionWorkflowAborted``,
not an instance, to a callback that asserts on it; docs/broker-quirks.md). Left alone,
the socket stays open until a garbage collection, which warns (ResourceWarning) in
whatever code runs then. So the transport closes it itself, once its loop has stopped,
through the attributes pika 1.3 and 1.4 keep it in. A release without them leaves the
socket to the collector, as before: nothing else changes.
"""

from __future__ import annotations

import socket
from typing import Any


def close_unfinished(conn: Any) -> int:
    """Close the socket(s) of *conn*, a pika connection whose loop has stopped; how many."""
    transport = getattr(conn, "_transport", None)  # the stream, once TCP is up
    workflow = getattr(conn, "_connection_workflow", None)
    connector = getattr(workflow, "_connector", None)  # the TCP connect, before it
    closed = 0
    for sock in (getattr(transport, "_sock", None), getattr(connector, "_sock", None)):
        if isinstance(sock, socket.socket) and sock.fileno() != -1:
            sock.close()
            closed += 1
    return closed
