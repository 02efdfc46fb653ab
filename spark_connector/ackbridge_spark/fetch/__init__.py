"""Executor-fetch source (``fetch=executors``): tasks fetch on the executors, the driver acks after commit.

:mod:`.options`, :mod:`.source` (the driver's reader and acks), :mod:`.task` (one fetch task),
:mod:`.files` (how a batch's rows and ack handles reach the driver).
"""
