"""Publishing with PubAcks: every publish is a request whose answer is the confirm.

All answers of one generation come to one wildcard inbox (``<inbox>.<seq>``),
so a publish costs one PUB and one callback, with no future or task per
message. The answer decides the outcome: a PubAck is confirmed (``duplicate``
noted in the reason), a JetStream API error or "no responders" (no stream
stores the subject) is refused with the reason, and a lost generation leaves
every pending publish unknown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ackbridge.messages import CONFIRMED, ConfirmOutcome, ConfirmStatus, refused, unknown, unsent

log = logging.getLogger("ackbridge.nats")

NO_RESPONDERS = "503"


def outcome_of(msg: Msg, subject: str) -> ConfirmOutcome:
    """The confirm for *msg*, the answer to a publish to *subject*."""
    headers = msg.headers or {}
    if headers.get("Status") == NO_RESPONDERS:
        return refused(f"no stream stores subject {subject!r} and nothing answers on it (no responders)")
    if not msg.data:
        # An ackbridge reply inbox (labelled acks) answers with an empty body.
        return CONFIRMED
    try:
        answer = json.loads(msg.data)
    except ValueError:
        return unknown(f"the answer on {subject!r} is not a JetStream PubAck")
    if not isinstance(answer, dict):
        return unknown(f"the answer on {subject!r} is not a JetStream PubAck")
    error = answer.get("error")
    if isinstance(error, dict):
        return refused(f"JetStream refused the publish to {subject!r}: {error.get('description', 'error')} "
                       f"(code {error.get('code')}, err_code {error.get('err_code')})")
    if "stream" not in answer:
        return unknown(f"the answer on {subject!r} is not a JetStream PubAck")
    if answer.get("duplicate"):
        return ConfirmOutcome(ConfirmStatus.CONFIRMED,
                              f"duplicate: already stored as sequence {answer.get('seq')} of stream "
                              f"{answer['stream']} (Nats-Msg-Id within the duplicate window)")
    return CONFIRMED


class Publishes:
    """The pending publishes of the live generation; every method runs on the loop."""

    def __init__(self, confirm: Callable[[int, ConfirmOutcome], None]) -> None:
        self._confirm = confirm
        self.client: Client | None = None
        self.prefix = ""
        self.sub: Subscription | None = None
        #: seq -> subject, for the publishes of the live generation awaiting their answer.
        self.pending: dict[int, str] = {}

    async def start(self, client: Client) -> None:
        self.client = client
        self.prefix = client.new_inbox() + "."
        self.sub = await client.subscribe(self.prefix + "*", cb=self._on_answer)

    async def _on_answer(self, msg: Msg) -> None:
        if not msg.subject.startswith(self.prefix):
            return  # an answer to an earlier generation's inbox: already reported unknown
        try:
            seq = int(msg.subject[len(self.prefix):])
        except ValueError:
            return
        subject = self.pending.pop(seq, None)
        if subject is None:
            return
        self._confirm(seq, outcome_of(msg, subject))

    async def send(self, seq: int, subject: str, body: bytes, headers: Mapping[str, str] | None) -> None:
        client = self.client
        if client is None or not client.is_connected:
            self._confirm(seq, unsent("not connected to the server (reconnecting); the message was not sent"))
            return
        if len(body) > client.max_payload:
            self._confirm(seq, refused(f"the body ({len(body)} bytes) is above the server's max_payload "
                                       f"({client.max_payload} bytes); not sent"))
            return
        self.pending[seq] = subject
        try:
            await client.publish(subject, body, reply=f"{self.prefix}{seq}",
                                 headers=dict(headers) if headers else None)
        except Exception as exc:
            if self.pending.pop(seq, None) is not None:
                self._confirm(seq, unsent(f"the publish could not be handed to the connection ({exc!r})"))

    def lost(self, reason: str) -> None:
        """The generation ended: every pending publish is unknown."""
        pending, self.pending = self.pending, {}
        self.client = None
        self.sub = None
        for seq in pending:
            self._confirm(seq, unknown(f"{reason} before the PubAck arrived"))
