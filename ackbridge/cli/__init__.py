"""The ``ackbridge`` command line (typer + rich)."""
