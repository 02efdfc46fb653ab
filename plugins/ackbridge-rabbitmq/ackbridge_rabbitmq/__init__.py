"""ackbridge adapter for RabbitMQ (AMQP 0-9-1), schemes ``amqp://`` and ``amqps://``.

Sync side: pika's SelectConnection on one I/O thread. Async side: aiormq (the
engine under aio-pika) on the caller's event loop. See docs/brokers/rabbitmq.md.
"""
