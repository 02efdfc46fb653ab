"""nats-py and JetStream errors -> the ackbridge error tree (at the plugin edge)."""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors

from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError
from ackbridge.urls import BrokerURL
from ackbridge_nats.link import describe


def nats_error(exc: BaseException, doing: str, url: BrokerURL) -> AckbridgeError:
    if isinstance(exc, AckbridgeError):
        return exc
    if isinstance(exc, nats.js.errors.APIError):
        return BrokerError(f"{doing} on {url.redacted}: JetStream said {exc.description or 'error'} "
                           f"(err_code {exc.err_code})", exc.code)
    if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return BrokerError(f"{doing} on {url.redacted}: no JetStream answers (is JetStream enabled?)", 503)
    if isinstance(exc, nats.errors.TimeoutError | asyncio.TimeoutError | nats.errors.ConnectionClosedError
                  | nats.errors.StaleConnectionError | ConnectionError):
        return ConnectionLostError(f"{doing} on {url.redacted}: {describe(exc)}")
    return BrokerError(f"{doing} on {url.redacted}: {describe(exc)}")
