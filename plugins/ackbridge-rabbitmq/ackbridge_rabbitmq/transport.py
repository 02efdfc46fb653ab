"""The ``amqp://`` / ``amqps://`` transport: pika on one I/O thread.

The plugin registers the sync transport only: asyncio is served by the core's
thread hand-off over it (``ThreadedAsyncTransport``), which measured faster
than an aiormq transport on the caller's loop (docs/benchmarks.md, "async
face"). The package, one job per module:

* ``sync_transport.py``: :class:`RabbitSyncTransport`, the connection's life,
  queue declaration and the reply inbox; its parts in ``sync_io.py`` (the I/O
  thread), ``sync_publishing.py`` (publishes and confirms) and
  ``sync_consuming.py`` (subscriptions and settlements).
* ``fastpath.py``: whether the sync side may use pika's internals
  (``coalescing.py``, ``deliveries.py``, ``frames.py``) or pika's public path.
* ``common.py`` (options, capabilities, destinations, properties),
  ``confirms.py`` (confirm bookkeeping), ``errors.py`` (driver errors mapped).
"""

from __future__ import annotations

from ackbridge_rabbitmq.sync_transport import RabbitSyncTransport

__all__ = ["RabbitSyncTransport"]
