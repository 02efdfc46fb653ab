"""ackbridge over RabbitMQ streams (rstream 1.1, tested on RabbitMQ 3.10).

A stream is an append-only log read by offset over the stream protocol (port
5552). Publishing is confirmed by the broker and de-duplicated per named
publisher; consuming reads from an offset spec and "settling" means storing
the consumer's offset on the broker. The offset log
(:class:`~ackbridge_rabbitmq_streams.offset_log.StreamOffsetLog`) reads exact
offset ranges, which is what the Spark source plans on.
"""
