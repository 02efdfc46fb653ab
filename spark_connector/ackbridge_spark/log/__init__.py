"""Executor-side source for offset logs (RabbitMQ streams): the driver plans offset ranges, executors read them.

:mod:`.options` (options, the choice of source), :mod:`.plan` (positions, caps, splits; pure),
:mod:`.source` (the stream reader on the driver), :mod:`.reader` (the executor's read), :mod:`.loss`
(what retention removed).
"""
