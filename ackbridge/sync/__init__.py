"""The thread face: :class:`Connection`, :class:`Consumer`, :class:`Publisher`,
locks and waits around :mod:`ackbridge.engine`, nothing else. Made by
:func:`ackbridge.connect`.
"""
