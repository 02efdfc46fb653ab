"""The asyncio transport on aio-pika (``asyncio_transport=aio-pika``), on the caller's loop.

One job per module:

* ``selection.py``: the class the plugin registers as its async transport; it
  builds the one the ``asyncio_transport`` option names (aio-pika or the
  threaded pika path);
* ``transport.py``: :class:`RabbitAioPikaTransport`, the core's operations
  mapped onto the parts below;
* ``link.py``: the connection, its generations and reconnects;
* ``sending.py``: publishes and confirms; ``receiving.py``: subscriptions,
  settlements, the reply inbox; ``topology.py``: queue declare/delete/purge/inspect;
* ``codec.py``: pamqp properties <-> ackbridge messages; ``errors.py``: aiormq's
  errors mapped to ackbridge's tree.

Names, queue arguments, capabilities and message rules are the pika
transport's own modules, shared.
"""
