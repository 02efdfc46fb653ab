"""``python -m ackbridge``: the ``ackbridge`` command."""

from ackbridge.cli.app import main

main()
