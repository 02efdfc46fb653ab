"""The asyncio face: the same classes and method names as :mod:`ackbridge.sync`,
awaits around :mod:`ackbridge.engine`, nothing else. Made by
:func:`ackbridge.connect_async`.
"""
