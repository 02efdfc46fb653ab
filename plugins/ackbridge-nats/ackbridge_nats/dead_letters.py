"""reject() on JetStream: a copy stored in the dead-letter subject, then ``+TERM``.

JetStream has no dead-letter exchange: the plugin stores the copy itself (a request
answered by a PubAck) and only then terminates the delivery, so a reject never
drops a message whose copy was not stored (it is ``-NAK``ed instead and comes back).
"""

from __future__ import annotations

import logging

from nats.aio.client import Client

from ackbridge.messages import WireSettle, unknown
from ackbridge_nats import codec
from ackbridge_nats.link import describe
from ackbridge_nats.naming import dead_letter_subject
from ackbridge_nats.receiving import NAK
from ackbridge_nats.sending import outcome_of

log = logging.getLogger("ackbridge.nats")

TERM = b"+TERM"


async def dead_letter(client: Client, op: WireSettle, template: str, timeout: float, nak: bytes) -> None:
    """Store *op*'s message in the subject *template* names, then +TERM it; *nak* it
    (the consumer's -NAK, with its delay) when no message came with it."""
    tag = str(op.wire_tag)
    message = op.message
    if message is None:
        log.error("ackbridge-nats: reject without the message: -NAK instead (no copy can be stored)")
        await client.publish(tag, nak)
        return
    subject = dead_letter_subject(template, message.source)
    try:
        answer = await client.request(subject, message.body, timeout=timeout,
                                      headers=codec.dead_letter_headers(message))
        outcome = outcome_of(answer, subject)
    except Exception as exc:
        outcome = unknown(describe(exc))
    if not outcome.confirmed and "no responders" in outcome.reason:
        # No dead-letter stream (declared with dead_letter=False): dropped, as AMQP drops without a DLX.
        log.warning("ackbridge-nats: rejected message of %r dropped: %s", message.source, outcome.reason)
    elif not outcome.confirmed:
        log.error("ackbridge-nats: dead-letter copy of a %r message not stored (%s): -NAK instead",
                  message.source, outcome.reason)
        await client.publish(tag, NAK)
        return
    await client.publish(tag, TERM)
