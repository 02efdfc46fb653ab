"""The rules, free of I/O: the settlement ledger, connection generations (the
only place a delivery goes stale), guarantees (windows, gaps), labelled acks,
back-off, interruptions and requeue-loop watching.

Imports nothing from :mod:`ackbridge.engine`, the faces or :mod:`ackbridge.transport`.
"""
