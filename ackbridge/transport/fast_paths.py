"""The switch of every plugin's fast path (a client's internals behind a version check).

Each plugin that goes past its client's public API reads one environment variable
(``ACKBRIDGE_PIKA_FAST_PATH``, ``ACKBRIDGE_NATS_FAST_PATH``...) when a transport is
made; set to a false word, as an option value reads it (``0``, ``false``, ``no``,
``off``), it forces the client's public path. The rule lives here once.
"""

from __future__ import annotations

import os

from ackbridge.options import FALSE_WORDS


def forced_off(env: str) -> bool:
    """True when the environment variable *env* asks for the client's public path."""
    return os.environ.get(env, "").strip().lower() in FALSE_WORDS
