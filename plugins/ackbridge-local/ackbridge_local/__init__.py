"""The embedded default broker: a durable multi-process queue in one SQLite file.

It is a local default for development, demos and tests, not a production
broker: one machine, one file, polling consumers.
"""
