"""ackbridge adapter for RabbitMQ (AMQP 0-9-1), schemes ``amqp://`` and ``amqps://``.

pika's SelectConnection on one I/O thread serves both faces (asyncio through
the core's thread hand-off). See docs/brokers/rabbitmq.md.
"""
