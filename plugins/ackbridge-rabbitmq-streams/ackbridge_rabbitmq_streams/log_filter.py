"""rstream 1.1 logs every frame it sends at DEBUG, the SASL frame with the
password in it (``SaslAuthenticate(... data=b'\\x00user\\x00password')``). A
filter on its ``rstream.client`` logger (logging configuration, not a change to
rstream) replaces that one frame's text; every other record passes unchanged.
"""

from __future__ import annotations

import logging

#: rstream's logger that prints frames.
FRAME_LOGGER = "rstream.client"


class HideSaslCredentials(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args and type(args[0]).__name__ == "SaslAuthenticate":
            record.args = ("SaslAuthenticate(<credentials hidden by ackbridge>)",)
        return True


def hide_credentials_in_frame_logs() -> None:
    """Install the filter once (idempotent)."""
    logger = logging.getLogger(FRAME_LOGGER)
    if not any(isinstance(f, HideSaslCredentials) for f in logger.filters):
        logger.addFilter(HideSaslCredentials())
