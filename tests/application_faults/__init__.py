"""Faults that applications cause (slow handlers, Ctrl-C, competing consumers, ack
deadlines, retention), each counted on the broker side as a scoreboard row.

Each module holds a ``row_*`` function returning a :class:`tests.scoreboard.checker.ScoreRow`
(the scoreboard tier runs them over every broker) and the CI test that runs it on one broker.
"""
