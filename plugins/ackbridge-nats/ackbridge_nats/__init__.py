"""ackbridge over NATS JetStream (nats-py 2.15, tested on nats-server 2.9).

A "queue" is a subject, the stream that stores it and a durable pull consumer
on that stream (:mod:`ackbridge_nats.naming`). Settlements are the JetStream
acks sent to each delivery's reply subject (``+ACK``, ``-NAK``, ``+TERM``);
publishes are requests answered by a PubAck. nats-py is asyncio-only: the
native :class:`~ackbridge_nats.connection.NatsAsyncTransport` runs on the
caller's loop, and :class:`~ackbridge_nats.connection.NatsSyncTransport`
runs the same transport on an event loop of its own I/O thread.
"""
