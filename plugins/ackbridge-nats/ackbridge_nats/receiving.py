"""One ackbridge subscription: pull requests on a durable consumer, with credit.

The consumer asks the server for at most ``prefetch - unsettled - requested``
messages at a time (``$JS.API.CONSUMER.MSG.NEXT``), so no more than
``prefetch`` deliveries are ever in flight to one ackbridge consumer; the
durable's ``max_ack_pending`` bounds it server-side as well. A pull request
that expires (status 408) or is cut short (409) hands its unused credit back
(``Nats-Pending-Messages``) and a new one is sent. nats-server before 2.9.15
drops an expired request without that status when a delivery attempt finds it
expired first (nats-server#3942): a request silent for two of its lifetimes is
taken as ended (:meth:`PullSubscription.watch`), or the subscription would wait
for it forever and receive nothing.

The reply subjects of deliveries not yet settled are kept, so that a closed
consumer or an ended generation can ``-NAK`` them: JetStream then redelivers
them at once instead of after ``ack_wait``. A consumer stopped with
``leave=True`` (``close(leave_unsettled=True)``) -NAKs only what arrived after
it stopped, which nobody saw; what the application took stays pending for
another connection to settle by its reply subject.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ackbridge.messages import InboundMessage
from ackbridge_nats import codec, dispatch, fastpath
from ackbridge_nats.link import describe, seconds_ns

log = logging.getLogger("ackbridge.nats")

NAK = b"-NAK"
_monotonic = time.monotonic  # a global read, not a module attribute's, per message
#: "Work in progress": JetStream starts the delivery's ack_wait again (nats-py's ``Msg.in_progress()``).
PROGRESS = b"+WPI"


class PullSubscription:
    """State of one subscription; every method runs on the loop."""

    def __init__(self, name: str, source: str, stream: str, durable: str, prefetch: int, expires: float,
                 deliver: Callable[[str, InboundMessage], None], *, direct: bool | None = None) -> None:
        self.name = name
        #: Messages handed over as nats-py parses them (dispatch.py), not through its subscription task.
        self.direct = fastpath.enabled() if direct is None else direct
        self.source = source
        self.stream = stream
        self.durable = durable
        self.prefetch = prefetch
        self.expires_ns = seconds_ns(expires)
        self._deliver = deliver
        self.client: Client | None = None
        self.generation = 0
        self.inbox = ""
        self.sub: Subscription | None = None
        #: Reply subjects delivered on this generation and not settled yet.
        self.outstanding: dict[str, None] = {}
        #: Of those, the ones that arrived after stop() began (never handed to the core).
        self.after_stop: list[str] = []
        #: Messages asked for by pull requests still open on the server.
        self.requested = 0
        self.closed = False
        self.consumer_gone = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._requests_ended: asyncio.Event | None = None
        #: time.monotonic() of the last pull request sent or message/status received on the inbox
        #: (not the loop's time(): a method call in Python, and this is read per message).
        self.last_heard = 0.0
        self._watchdog: asyncio.Task[None] | None = None
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"

    async def start(self, client: Client, generation: int) -> None:
        """(Re)open on *client*: a fresh inbox, no credit in use, one pull request."""
        self.client = client
        self.generation = generation
        self.outstanding = {}
        self.after_stop = []
        self.requested = 0
        self.inbox = client.new_inbox()
        self.sub = await dispatch.subscribe(client, self.inbox, functools.partial(self._on_msg, self.inbox),
                                            functools.partial(self._on_plain, self.inbox), direct=self.direct)
        self.last_heard = time.monotonic()
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self.watch())
        await self.top_up()

    async def watch(self) -> None:
        """Take open pull requests as ended when the inbox heard nothing for two of
        their lifetimes (plus a second): a live request ends with a delivery or a
        status within one, so only a request the server dropped silently is this
        quiet (nats-server#3942). Its credit is asked for again."""
        quiet_limit = 2 * self.expires_ns / 1e9 + 1.0
        while True:
            await asyncio.sleep(self.expires_ns / 1e9)
            if self.requested and time.monotonic() - self.last_heard > quiet_limit:
                log.debug("ackbridge-nats: %d requested message(s) of %s had no answer in %.1f s: the server "
                          "dropped the pull request (nats-server#3942); asking again", self.requested,
                          self.source, quiet_limit)
                self.requested = 0
                self.last_heard = time.monotonic()
                if self.closed:
                    self._check_requests_ended()
                else:
                    await self.top_up()

    def _on_msg(self, inbox: str, msg: Msg) -> None:
        # Called as nats-py parses each message (dispatch.py): it must not wait.
        if inbox != self.inbox:
            return  # an earlier generation's inbox: released on reconnect
        self.last_heard = _monotonic()
        reply = msg.reply
        if not reply:
            self._on_status(msg)
        elif not self._held(reply):
            self._deliver(self.name, codec.inbound(msg, self.generation, self.source))

    def _on_plain(self, inbox: str, subject: bytes, reply: bytes, data: bytes) -> None:
        """_on_msg for a delivery without headers, from its raw fields (dispatch.take_over)."""
        if inbox != self.inbox:
            return
        self.last_heard = _monotonic()
        tag = reply.decode()
        if not self._held(tag):
            self._deliver(self.name, codec.inbound_plain(subject.decode(), tag, data, self.generation, self.source))

    def _held(self, reply: str) -> bool:
        """Count a delivery in (its credit used, its reply subject outstanding); True when
        it is held to be released instead: it reached a stopping subscription's open
        pull request, and is -NAKed once the request ends."""
        if self.requested:
            self.requested -= 1
        self.outstanding[reply] = None
        if not self.closed:
            return False
        self.after_stop.append(reply)
        self._check_requests_ended()
        return True

    def _check_requests_ended(self) -> None:
        if self.requested == 0 and self._requests_ended is not None:
            self._requests_ended.set()

    def _on_status(self, msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get("Status", "")
        if status == "100":  # idle heartbeat
            return
        try:
            unused = int(headers.get("Nats-Pending-Messages", "0"))
        except ValueError:
            unused = 0
        self.requested = max(0, self.requested - unused) if unused else 0
        if self.closed:
            self._check_requests_ended()
            return
        description = headers.get("Description", "")
        if status == "409" and "deleted" in description.lower():
            self.consumer_gone = True
            log.error("ackbridge-nats: consumer %s of stream %s was deleted: %r gets no more deliveries",
                      self.durable, self.stream, self.source)
            return
        if status not in ("408", "404"):
            log.debug("ackbridge-nats: pull request on %s ended: %s %s", self.source, status, description)
        if self.client is not None and not self.closed:
            task = asyncio.get_running_loop().create_task(self.top_up())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def credit_to_ask(self) -> int:
        """The credit a pull request would ask for now: at least half of it free (or all
        of it, no request open), else 0. Checked before :meth:`top_up` on the per-ack path
        (no coroutine made for the many settlements that ask for nothing)."""
        # The arithmetic first: on most settlements it alone says "nothing yet".
        requested = self.requested
        free = self.prefetch - len(self.outstanding) - requested
        if free <= 0 or (requested and free < max(1, self.prefetch // 2)):
            return 0
        client = self.client
        if client is None or self.closed or self.consumer_gone or not client.is_connected:
            return 0
        return free

    async def top_up(self) -> None:
        """Ask for more when at least half the credit (or all of it) is free."""
        client = self.client
        free = self.credit_to_ask()
        if not free or client is None:
            return
        self.requested += free
        self.last_heard = time.monotonic()
        request = json.dumps({"batch": free, "expires": self.expires_ns}).encode()
        try:
            await client.publish(self._next_subject, request, reply=self.inbox)
        except Exception as exc:  # the link's closed callback ends the generation
            self.requested -= free
            log.debug("ackbridge-nats: pull request on %s not sent: %s", self.source, describe(exc))

    def settled(self, reply: str) -> None:
        self.outstanding.pop(reply, None)

    async def release(self, client: Client, replies: list[str]) -> None:
        """-NAK *replies* on *client*: redelivered at once instead of after ack_wait."""
        for reply in replies:
            try:
                await client.publish(reply, NAK)
            except Exception as exc:
                log.debug("ackbridge-nats: could not release a delivery of %s: %s", self.source, describe(exc))
                return

    async def stop(self, *, wait: bool = True, leave: bool = False) -> list[str]:
        """Stop receiving and release (-NAK) every unsettled delivery -- with *leave*,
        only those that arrived after the stop began; return the reply subjects it
        could not release (connection down) for the next one.

        nats-server 2.9 keeps serving a pull request after its inbox is gone, and
        a -NAKed message redelivered into such a request is lost until ack_wait
        (reproduced with raw nats-py: docs/brokers/nats.md, quirks). So the inbox stays
        subscribed until the open requests end (each expires after pull_expires):
        what arrives meanwhile is held, then everything is -NAKed."""
        self.closed = True
        if wait and self.requested and self.client is not None and self.client.is_connected:
            self._requests_ended = asyncio.Event()
            try:
                await asyncio.wait_for(self._requests_ended.wait(), self.expires_ns / 1e9 + 1)
            except TimeoutError:
                log.warning("ackbridge-nats: pull requests of %s did not end in time", self.source)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        sub, self.sub = self.sub, None
        client = self.client
        left = list(self.after_stop if leave else self.outstanding)
        self.outstanding.clear()
        self.after_stop = []
        if client is None or not client.is_connected:
            return left
        if left:
            await self.release(client, left)
        if left and wait:
            # The server may hand what was just released to a request it still counts as
            # open although our count says none is (a status without its pending count):
            # the inbox stays one expiry longer, then what reached it is released again,
            # when no request of ours can be open any more.
            await asyncio.sleep(self.expires_ns / 1e9)
            late, self.after_stop = self.after_stop, []
            if late:
                log.debug("ackbridge-nats: %d released deliveries of %s came back to its closing inbox: "
                          "released again", len(late), self.source)
                await self.release(client, late)
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception as exc:
                log.debug("ackbridge-nats: unsubscribe of %s: %s", self.source, describe(exc))
        return []
