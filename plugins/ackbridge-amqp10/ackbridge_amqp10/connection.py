"""The ``amqp10://`` transport: the core's SyncTransport contract over a proton Container.

This module is the transport class and the connection's life (open,
generations, reconnect, close). The parts live in their own modules and are
given what they need (the shared :class:`~ackbridge_amqp10.links.Wire` state,
the container thread, the core's events), not the transport:

* :mod:`~ackbridge_amqp10.container`, :mod:`~ackbridge_amqp10.bursts`: the Container thread and the
  hand-off to it; deliveries and confirms handed to the core once per reactor pass;
* :mod:`~ackbridge_amqp10.handler`: proton's callbacks;
* :mod:`~ackbridge_amqp10.receiving`: subscriptions, credit, deliveries, settlement, reply inbox;
* :mod:`~ackbridge_amqp10.sending`: sender links, publishes and confirms;
* :mod:`~ackbridge_amqp10.errors`: conditions -> ackbridge errors;
* :mod:`~ackbridge_amqp10.peer_text`: the peer's text read without proton's strict UTF-8;
* :mod:`~ackbridge_amqp10.aio` (the asyncio face), :mod:`~ackbridge_amqp10.options`, ``tls``, ``codec``.

Threads: application threads never touch proton; they hand work to the
container thread. State marked "container thread" below is read and written
there only.

Settlement: ``settle`` checks the generation on the caller's thread
(:func:`ackbridge.kernel.generations.check_ops`) and again on the container thread,
where the race with a connection loss is decided: an op whose generation
ended in between is dropped, never applied (exactly as if its disposition had
been lost with the connection; the broker redelivers). It does not wait for
the container, so the container thread may call ``events.deliver`` while an
application thread holds the consumer's lock.
"""

from __future__ import annotations

import logging
import uuid
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from proton import Condition, Endpoint

from ackbridge.capabilities import Verb
from ackbridge.errors import AckbridgeError, BrokerError, ConfigurationError, ConnectionLostError, UnsupportedVerbError
from ackbridge.kernel.backoff import Backoff
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import OutboundMessage, WireSettle
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_amqp10 import codec, errors
from ackbridge_amqp10.bursts import BurstEvents
from ackbridge_amqp10.capabilities import RABBITMQ, for_peer
from ackbridge_amqp10.container import ContainerThread
from ackbridge_amqp10.handler import Handler
from ackbridge_amqp10.links import Wire, close_link, same, session
from ackbridge_amqp10.options import OPTIONS, modified_is_safe
from ackbridge_amqp10.receiving import Receiving
from ackbridge_amqp10.sending import Sending
from ackbridge_amqp10.tls import ssl_domain

log = logging.getLogger("ackbridge.amqp10")

_LOGIN_GRACE = 5.0
#: Beyond connect_timeout, after which Receiving stops waiting for a session's end itself.
_END_SPARE = 2.0


class Amqp10Transport(SyncTransport):
    capabilities = RABBITMQ
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.events = events = self.burst = BurstEvents(events)  # every event, the parts' too (bursts.py)
        if url.scheme not in ("amqp10", "amqp10s"):
            raise ConfigurationError(f"{url.redacted}: the amqp10 adapter serves amqp10:// and amqp10s:// only")
        if not url.host:
            raise ConfigurationError(f"{url.redacted}: give a host, e.g. amqp10://guest:guest@127.0.0.1:5672")
        own = {spec.name: options.get(spec.name, spec.default) for spec in OPTIONS}
        self.peer: str = own["peer"]
        self._queue_address = str(own["queue_address"])
        self._hostname: str | None = own["hostname"]
        self._sasl_mechanisms: str | None = own["sasl_mechanisms"]
        self.capabilities = for_peer(self.peer)
        self._tls = url.scheme == "amqp10s"
        if self._tls and not self.settings.tls_verify:
            warnings.warn(f"{url.redacted}: TLS certificate verification is switched off (tls_verify=false)",
                          stacklevel=2)
        self.container = ContainerThread(Handler(self), what=url.redacted, timeout=self.settings.connect_timeout,
                                         recover=self._recover, scrub=self._scrub, last=self.burst.flush)
        #: The connection's state the parts share (container thread only).
        self.wire = Wire(url.redacted)
        self.receiving = Receiving(
            self.wire, self.container, events, describe=self.describe,
            reconnect_max_delay=self.settings.reconnect_max_delay, inbox_template=str(own["inbox"]),
            count_header=self.capabilities.support(Verb.DELIVERY_COUNT).available,
            end_wait=self.settings.connect_timeout)
        self.sending = Sending(self.wire, self.container, events, describe=self.describe,
                               max_links=int(own["max_sender_links"]))
        # --- container thread only ---------------------------------------------------
        self.last_condition: Any = None
        self.modified_safe = False
        self.remote_properties: dict[str, Any] = {}
        self._opening: Future[None] | None = None
        self._closed_future: Future[None] | None = None
        self._backoff = Backoff(self.settings.reconnect_max_delay)

    # ---- helpers ------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self.wire.generation

    @property
    def live(self) -> int | None:
        """The generation whose settlements may go out; None while (re)connecting."""
        return self.wire.live

    def _scrub(self, text: str) -> str:
        return errors.scrub(text, self.url)

    @property
    def reply_inbox(self) -> str | None:
        """The reply inbox's address (the reply-to of labelled publishes), once opened."""
        inbox = self.receiving.inbox
        return inbox.address if inbox is not None else None

    def describe(self, condition: Any) -> str:
        """A peer's condition as text, with any secret scrubbed."""
        return errors.describe(condition, self.url)

    def broker_error(self, text: str) -> BrokerError:
        return errors.broker_error(self.url.redacted, text)

    def queue_address(self, name: str) -> str:
        address = name if name.startswith("/") else self._queue_address.format(name=name)
        return codec.check_address(address)

    # ---- lifecycle ------------------------------------------------------------------
    def open(self) -> None:
        if self.container.started:
            return
        self.container.start()
        self.burst.thread_id = self.container.ident
        opening: Future[None] = Future()

        def start(_f: Future[None]) -> None:
            self._opening = opening
            self._connect()

        self.container.call(start)
        try:
            self._wait_open(opening)
        except AckbridgeError:
            self._shutdown()
            raise

    def _wait_open(self, opening: Future[None]) -> None:
        """Wait ``connect_timeout`` plus a grace for the login's answer: RabbitMQ 3.10
        answers a refused AMQP 1.0 login only after about 3 s, so a short
        connect_timeout would report a wrong password as a timeout."""
        try:
            opening.result(self.settings.connect_timeout)
            return
        except TimeoutError:
            pass
        try:
            opening.result(_LOGIN_GRACE)
        except TimeoutError:
            opening.cancel()
            raise self.container.no_answer("the connection open") from None

    def _connect(self) -> None:
        container = self.container.container
        assert container is not None
        url = self.url
        scheme = "amqps" if self._tls else "amqp"
        port = url.port or (5671 if self._tls else 5672)
        # amqp10:// is the caller's explicit choice of plain TCP, so PLAIN may go over it.
        kwargs: dict[str, Any] = {"reconnect": False, "allow_insecure_mechs": True}
        if url.username:
            # Credentials go as arguments, never inside the URL: proton quotes the URL in its errors.
            kwargs["user"] = url.username
            if url.password is not None:
                kwargs["password"] = url.password.reveal()
        kwargs["allowed_mechs"] = self._sasl_mechanisms or ("PLAIN" if url.username else "ANONYMOUS")
        if self.settings.heartbeat:
            kwargs["heartbeat"] = float(self.settings.heartbeat)
        if self._hostname:
            kwargs["virtual_host"] = self._hostname
        if self._tls:
            kwargs["ssl_domain"] = ssl_domain(self.settings)
        self.last_condition = None
        self.wire.conn = container.connect(url=f"{scheme}://{url.host}:{port}", **kwargs)

    def close(self) -> None:
        if not self.container.started or not self.container.running:
            return
        done: Future[None] = Future()

        def begin(_f: Future[None]) -> None:
            self.wire.closing = True
            self._closed_future = done
            self.sending.fail_all("connection closed before the broker answered")
            # The receivers' sessions end first and the close waits for the broker's
            # answers: a close overtakes dispositions the broker has not applied yet
            # (see ending.py). The callback runs on the container thread.
            ended: Future[None] = Future()
            ended.add_done_callback(lambda _e: close_conn())
            self.receiving.end_all(ended)

        def close_conn() -> None:
            conn = self.wire.conn
            if conn is None or conn.state & Endpoint.LOCAL_CLOSED:
                if not done.done():
                    done.set_result(None)
                return
            conn.close()

        self.container.call(begin)
        try:
            # The receivers' ends (bounded by connect_timeout), then the close's own answer.
            done.result(2 * self.settings.connect_timeout)
        except Exception:
            pass  # the socket is torn down below either way
        self._shutdown()

    def _shutdown(self) -> None:
        def before() -> None:
            self.wire.closing = True
            self.wire.live = None

        self.container.stop(before)

    # ---- connection events (container thread) -------------------------------------------
    def opened(self, conn: Any) -> None:
        wire = self.wire
        if not same(conn, wire.conn):
            return
        props = conn.remote_properties or {}
        self.remote_properties = {str(k): v for k, v in props.items()}
        product = self.remote_properties.get("product")
        version = self.remote_properties.get("version")
        self.modified_safe = modified_is_safe(
            str(product) if product is not None else None, str(version) if version is not None else None)
        self.receiving.modified = self.modified_safe and self.peer == "generic"
        wire.generation += 1
        wire.live = wire.generation
        self._backoff.reset()
        self.receiving.reattach_all()
        if self._opening is not None and not self._opening.done():
            self._opening.set_result(None)
        self._opening = None

    def failed(self, conn: Any, condition: Any) -> None:
        """The connection could not be opened, or it was lost, or the peer closed it."""
        if not same(conn, self.wire.conn):
            return
        condition = condition or self.last_condition
        reason = self.describe(condition)
        self.wire.conn = None
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done():
            opening.set_exception(errors.open_error(condition, reason, self.url))
            return
        self._end_generation(f"connection lost: {reason}")
        if self.wire.closing:
            if self._closed_future is not None and not self._closed_future.done():
                self._closed_future.set_result(None)
            return
        if self.settings.reconnect:
            self.container.schedule(self._backoff.next_delay(), self._reconnect)

    def _reconnect(self) -> None:
        if self.wire.closing or self.wire.conn is not None:
            return
        self._connect()

    def _end_generation(self, reason: str) -> None:
        ended = self.wire.live
        self.wire.live = None
        self.receiving.generation_ended()
        self.sending.fail_all(reason)
        # Our own close ends the generation for good: no reconnect follows, so the core
        # is not told (it would count one in ackbridge.reconnects; its consumers are closed).
        if ended is not None and not self.wire.closing:
            try:
                self.events.generation_ended(ended, reason)
            except Exception:
                log.exception("generation_ended callback failed")

    def connection_closed(self, conn: Any) -> None:
        """Both ends closed (our close, answered)."""
        if self._closed_future is not None and not self._closed_future.done():
            self._end_generation("connection closed")
            self._closed_future.set_result(None)

    def _recover(self, what: str) -> None:
        """Dispatching an event raised (see ContainerThread): drop the connection and
        make a new one, as after a network fault."""
        reason = self._scrub(what)
        conn = self.wire.conn
        if conn is None:
            log.debug("ackbridge amqp10: an event handler failed again (%s)", reason)
            return
        log.error("ackbridge amqp10: an event handler failed (%s); dropping the connection", reason)
        self._drop(conn, Condition("ackbridge:internal-error", f"event handler failed: {reason}"),
                   f"the connection was dropped during the attach ({reason})")

    def _drop(self, conn: Any, condition: Condition, attach_error: str) -> None:
        waiters = self.wire.waiters
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_exception(ConnectionLostError(f"{self.url.redacted}: {attach_error}"))
        waiters.clear()
        self.failed(conn, condition)
        try:
            conn.close()
        except Exception:
            log.debug("closing the dropped connection raised", exc_info=True)

    # ---- the declared fault seam (TransportBase) -----------------------------------
    def sever(self, reason: str) -> None:
        """End the connection as a network fault would: the generation ends at once
        (pending publishes unknown, deliveries stale) and, with ``reconnect``, a
        new connection follows after the back-off."""

        def cut(future: Future[None]) -> None:
            conn = self.wire.conn
            if conn is not None:
                self._drop(conn, Condition("ackbridge:severed", reason), f"severed: {reason}")
            future.set_result(None)

        future: Future[None] = self.container.call(cut)
        if not self.container.on_thread():
            self.container.wait(future, "sever")

    # ---- queues ---------------------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Attach (and detach) a sender to the queue address, which makes RabbitMQ
        declare it. AMQP 1.0 cannot configure a queue, so ``dead_letter=True``
        raises UnsupportedVerbError: create such queues on the broker."""
        address = self.declare_address(name, dead_letter=dead_letter)
        self.container.wait(self.container.call(lambda f: self.declare(address, f)), f"the attach of {address!r}")

    def declare_address(self, name: str, *, dead_letter: bool) -> str:
        """The address declare_queue() attaches to (raising for dead_letter=True)."""
        if dead_letter:
            raise UnsupportedVerbError(
                "amqp10", "declare_queue(dead_letter=True)",
                "AMQP 1.0 has no queue management; create the queue with its dead-letter target on the "
                "broker (RabbitMQ: x-dead-letter-exchange argument or a policy), or pass dead_letter=False")
        return self.queue_address(name)

    def declare(self, address: str, future: Future[None]) -> None:
        """Container thread: attach a sender to *address*; *future* completes on the attach."""
        conn = self.wire.require_conn()
        container = self.container.container
        assert container is not None
        link = container.create_sender(session(conn), address, name=f"declare-{uuid.uuid4().hex[:8]}")
        self.wire.waiters[link] = future
        future.add_done_callback(lambda _f: self.container.submit(lambda: close_link(link)))

    # ---- consuming ------------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        self.container.wait(self.subscribe_future(subscription, source, prefetch), f"the attach of {source!r}")

    def subscribe_future(self, subscription: str, source: str, prefetch: int) -> Future[None]:
        return self.container.call(lambda f: self.receiving.subscribe(subscription, source, prefetch, f))

    def unsubscribe(self, subscription: str) -> None:
        if not self.container.running:
            return
        future: Future[None] = self.container.call(lambda f: self.receiving.unsubscribe(subscription, f))
        if not self.container.on_thread():  # on it, the answer could never come while waiting
            # Receiving completes it by connect_timeout (the broker's end, or giving up on it).
            self.container.wait(future, "unsubscribe", spare=_END_SPARE)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        if not ops:
            return
        live = self.wire.live
        if live is None or len(ops) > 1 or ops[0].generation != live:
            check_ops(ops, live, "not connected: reconnecting")
        batch = list(ops)
        if self.container.on_thread():
            self.receiving.apply(batch)
        else:
            self.container.submit(lambda: self.receiving.apply(batch))

    # ---- publishing ---------------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.sending.publish(seq, destination, message)

    # ---- replies --------------------------------------------------------------------------
    def open_reply_inbox(self) -> str:
        return self.container.wait(self.inbox_future(), "the attach of the reply inbox")

    def inbox_future(self) -> Future[str]:
        return self.container.call(self.receiving.open_inbox)


__all__ = ["Amqp10Transport"]
