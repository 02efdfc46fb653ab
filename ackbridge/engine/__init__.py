"""Every I/O-free decision of a connection, consumer and publisher, written once
for both faces (:mod:`ackbridge.sync`, :mod:`ackbridge.aio`): nothing here
blocks, awaits or touches a transport. Built on :mod:`ackbridge.kernel`.
"""
