"""ackbridge adapter for RabbitMQ (AMQP 0-9-1), schemes ``amqp://`` and ``amqps://``.

pika's SelectConnection on one I/O thread serves both faces by default: asyncio
through the core's thread hand-off over the sync transport
(``ThreadedAsyncTransport``), which measured faster than aio-pika on the caller's
loop (benchmarks/aio_pika_transport_bench.py). ``asyncio_transport=aio-pika``
picks the transport in ``aio/`` instead: aio-pika on the caller's loop, no
thread. See docs/brokers/rabbitmq.md. The package, one job per module:

* ``plugin.py``: the pluggy hook (AdapterSpec); ``capabilities.py``: what it
  declares, per queue type; ``options.py``: its options, the resolved
  settings and the endpoint (the core's TLS context for ``amqps``).
* ``connection.py``: :class:`RabbitSyncTransport`, the connection's life and
  generations, and the :class:`Link` its parts share; ``io_thread.py``: the
  I/O thread and the hand-offs to it.
* ``receiving.py``: subscriptions, deliveries, settlements, the reply inbox;
  ``sending.py``: publishes and confirms (bookkeeping in ``confirms.py``);
  ``topology.py``: queue declare/delete/purge/inspect; ``queues.py``: names,
  destinations and queue arguments.
* ``codec.py``: pika properties <-> ackbridge messages; ``errors.py``: pika's
  errors mapped to ackbridge's tree.
* ``fastpath.py``: whether the transport may use pika's internals
  (``coalescing.py``, ``deliveries.py``, ``frames.py``) or pika's public path.
* ``aio/``: the aio-pika asyncio transport and ``selection.py``, the class
  registered as the async transport, which builds the one the option names.
"""
