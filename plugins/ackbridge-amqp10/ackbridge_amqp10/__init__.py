"""AMQP 1.0 adapter (python-qpid-proton): ``amqp10://`` and ``amqp10s://`` (TLS).

One proton :class:`~proton.reactor.Container` runs on its own thread per
transport; every other thread hands it work through an
:class:`~proton.reactor.EventInjector`.
"""
