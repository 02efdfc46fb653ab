"""The ``amqp10://`` transport: the core's wire operations on a proton Container.

Threads: one proton Container per transport runs on its own thread and owns
every proton object. Application threads never touch proton: they queue work
(:meth:`Amqp10Transport._submit`) and wake the container through an
``EventInjector`` with one ``ApplicationEvent`` per batch of work.

Settlement: ``settle`` checks the generation on the caller's thread (raising
:class:`~ackbridge.errors.StaleDeliveryError`) and again on the container
thread, where the race with a connection loss is decided: an op whose
generation ended in between is dropped, never applied (exactly as if its
disposition had been lost with the connection; the broker redelivers). It does
not wait for the container, so the container thread may call
``events.deliver`` while an application thread holds the consumer's lock.

Credit: the receiver starts with ``prefetch`` credit and gets one more per
settled delivery, so unsettled deliveries never exceed ``prefetch``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from cproton import pn_delivery as _pn_delivery  # type: ignore[import-untyped]  # proton's C binding ships no types
from proton import Condition, Delivery, Endpoint, Handler, Message, SSLDomain
from proton.handlers import IncomingMessageHandler, MessagingHandler, OutgoingMessageHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

from ackbridge.capabilities import Verb
from ackbridge.errors import (
    AckbridgeError,
    BrokerError,
    ConfigurationError,
    ConnectionLostError,
    InvalidOptionError,
    StaleDeliveryError,
    UnsupportedVerbError,
)
from ackbridge.messages import CONFIRMED, OutboundMessage, WireSettle, WireVerb, refused, unknown
from ackbridge.options import OptionSpec, positive_int
from ackbridge.text import CheckedOnce
from ackbridge.transport import ThreadedAsyncSide, TransportEvents
from ackbridge.urls import BrokerURL, redact
from ackbridge_amqp10 import codec
from ackbridge_amqp10.capabilities import RABBITMQ, for_peer

log = logging.getLogger("ackbridge.amqp10")


def _tolerate_bad_utf8_from_the_peer() -> None:
    """proton's binding decodes every C string strictly, and RabbitMQ 3.10 cuts
    long error descriptions at a byte limit, sometimes inside a multi-byte
    character, and writes queue names into them as Latin-1 bytes. The strict
    decode then raises inside proton's own handlers on *every* read of that
    condition, which stops the container thread (each retry hits it again).
    Fall back to Latin-1, which decodes any bytes: the text stays readable and
    the connection's error path runs as designed."""
    import cproton

    if getattr(cproton.utf82string, "_ackbridge_tolerant", False):
        return

    def utf82string(string: Any) -> str | None:
        if string == cproton.ffi.NULL:
            return None
        raw: bytes = cproton.ffi.string(string)
        try:
            return raw.decode("utf8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")

    utf82string._ackbridge_tolerant = True  # type: ignore[attr-defined]
    cproton.utf82string = utf82string


_tolerate_bad_utf8_from_the_peer()

T = TypeVar("T")

_PEERS = ("rabbitmq", "generic")

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("peer", str, "rabbitmq", "capability table to declare: 'rabbitmq' (3.10 plugin gaps) or 'generic'",
               lambda v: v in _PEERS, "must be 'rabbitmq' or 'generic'"),
    OptionSpec("connect_timeout", float, 10.0, "seconds to wait for the connection, a link attach or a detach",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("heartbeat", float, 30.0, "idle timeout in seconds announced to the broker (0: none)",
               lambda v: v >= 0, "must be >= 0"),
    OptionSpec("reconnect", bool, True, "reconnect (and re-attach every link) after the connection is lost"),
    OptionSpec("reconnect_max_delay", float, 5.0, "longest wait between reconnect attempts, seconds",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("inbox", str, "/queue/ackbridge.reply.{id}",
               "reply inbox address ({id} is filled in); 'dynamic' asks the broker for a dynamic node",
               lambda v: bool(v), "must not be empty"),
    OptionSpec("queue_address", str, "/queue/{name}", "address declare_queue() attaches to ({name} is filled in)",
               lambda v: "{name}" in v, "must contain {name}"),
    OptionSpec("hostname", str, None, "AMQP open hostname (RabbitMQ: 'vhost:NAME' picks a vhost)", nullable=True),
    OptionSpec("sasl_mechanisms", str, None, "space-separated SASL mechanisms to allow (default: PLAIN with a "
               "user, ANONYMOUS without)", nullable=True),
    OptionSpec("verify", bool, True, "amqp10s: verify the broker's certificate and host name"),
    OptionSpec("ca_file", str, None, "amqp10s: CA bundle to trust (default: the system's)", nullable=True),
    OptionSpec("cert_file", str, None, "amqp10s: client certificate (PEM)", nullable=True),
    OptionSpec("key_file", str, None, "amqp10s: client private key (PEM)", nullable=True),
    positive_int("max_sender_links", 64, "idle sender links kept open (one per destination address)"),
)

# RabbitMQ < 3.10.11 ends the whole session on a 'modified' outcome.
_MODIFIED_SAFE_FROM = (3, 10, 11)
_AUTH_CONDITIONS = {"amqp:unauthorized-access", "amqp:sasl:auth-failed", "amqp:sasl:sys-perm"}


def _version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def credit_to_grant(prefetch: int, held: int, credit: int) -> int:
    """Link credit to add so that what the receiver holds unsettled plus its credit
    comes back to *prefetch*, in batches (fewer flow frames): nothing while the
    credit left is above half the prefetch and less than half is owed.

    *credit* is proton's count, which goes below zero when the broker sent more
    than was granted; the grant first brings it back to zero, and a receiver
    holding more than *prefetch* gets no new credit until it settles below it."""
    target = max(prefetch - held, 0)
    grant = target - credit
    if grant <= 0:
        return 0
    half = prefetch // 2
    if credit < 0 or grant > half or credit <= half:
        return grant
    return 0


def modified_is_safe(product: str | None, version: str | None) -> bool:
    """Whether a 'modified' outcome can be sent without the peer ending the session."""
    if product is None or "rabbitmq" not in product.lower():
        return product is not None
    return version is not None and _version(version) >= _MODIFIED_SAFE_FROM


@dataclass(eq=False)
class _Sub:
    name: str
    source: str
    prefetch: int
    receiver: Any = None
    attached: Future[None] | None = None
    retry_delay: float = 0.1
    held: int = 0  # deliveries on the current receiver not settled yet
    credit: int = 0  # link credit granted and not used yet (proton's count, kept here: no C call per message)


@dataclass(eq=False)
class _Out:
    """One sender link (one destination address) and its unconfirmed publishes."""

    address: str
    link: Any
    pending: dict[int, None] = field(default_factory=dict)
    credited: bool = False


@dataclass(eq=False)
class _Inbox:
    address: str  # where replies are sent (the reply-to)
    dynamic: bool
    source: str | None = None  # what the receiver attaches to, when not the address itself
    receiver: Any = None
    attached: Future[str] | None = None


class _Retry(Handler):
    """A container timer task."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn

    def on_timer_task(self, event: Any) -> None:
        self._fn()


class Amqp10Transport(ThreadedAsyncSide):
    capabilities = RABBITMQ
    option_specs = OPTIONS
    supports_sync = True
    supports_async = True

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        if url.scheme not in ("amqp10", "amqp10s"):
            raise ConfigurationError(f"{url.redacted}: the amqp10 adapter serves amqp10:// and amqp10s:// only")
        if not url.host:
            raise ConfigurationError(f"{url.redacted}: give a host, e.g. amqp10://guest:guest@127.0.0.1:5672")
        self._opt: dict[str, Any] = {spec.name: options.get(spec.name, spec.default) for spec in OPTIONS}
        self.capabilities = for_peer(self._opt["peer"])
        self._tls = url.scheme == "amqp10s"
        if self._tls and not self._opt["verify"]:
            warnings.warn(f"{url.redacted}: TLS certificate verification is switched off (verify=false)",
                          stacklevel=2)
        self._handler = _Handler(self)
        self._container: Container | None = None
        self._injector: EventInjector | None = None
        self._thread: threading.Thread | None = None
        self._work: deque[Callable[[], None]] = deque()
        self._work_lock = threading.Lock()
        self._wake_pending = False
        # --- owned by the container thread -------------------------------------
        self._conn: Any = None
        self._generation = 0
        self._live: int | None = None  # generation whose settlements may go out
        self._tags = itertools.count(1)
        # tag -> (proton delivery, its subscription, the receiver link it came on)
        self._deliveries: dict[int, tuple[Any, _Sub, Any]] = {}
        self._subs: dict[str, _Sub] = {}
        self._count_header_of: tuple[Any, bool] = (None, False)
        self._outs: dict[str, _Out] = {}
        self._check_address = CheckedOnce(codec.check_address)
        self._seq_out: dict[int, _Out] = {}  # unconfirmed publish -> its sender link
        self._out_by_link: dict[Any, _Out] = {}
        self._inbox: _Inbox | None = None
        self._opening: Future[None] | None = None
        self._closing = False
        self._closed_future: Future[None] | None = None
        self._last_condition: Any = None
        self._reconnect_delay = 0.1
        self._modified_safe = False
        self.remote_properties: dict[str, Any] = {}

    # ---- helpers ------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._generation

    def _scrub(self, text: str) -> str:
        text = redact(text)
        secret = self.url.password_text
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
        return text

    def _describe(self, condition: Any) -> str:
        if condition is None:
            return "no reason given"
        name = getattr(condition, "name", "") or ""
        description = getattr(condition, "description", "") or ""
        return self._scrub(f"{name}: {description}" if description else str(name))

    def _on_container(self) -> bool:
        thread = self._thread
        return thread is not None and threading.get_ident() == thread.ident

    def _submit(self, fn: Callable[[], None]) -> None:
        """Run *fn* on the container thread (in submission order)."""
        injector = self._injector
        if injector is None:
            raise ConnectionLostError(f"{self.url.redacted}: transport is not open")
        with self._work_lock:
            self._work.append(fn)
            if self._wake_pending:
                return
            self._wake_pending = True
        injector.trigger(ApplicationEvent("ackbridge_work"))

    def _call(self, fn: Callable[[Future[T]], None], timeout: float | None = None) -> Future[T]:
        """Run ``fn(future)`` on the container thread; *fn* completes the future."""
        future: Future[T] = Future()

        def run() -> None:
            if future.done():
                return
            try:
                fn(future)
            except BaseException as exc:  # surfaced to the caller, never kills the loop
                if not future.done():
                    future.set_exception(exc)

        if self._on_container():
            run()
        else:
            self._submit(run)
        return future

    def _wait(self, future: Future[T], what: str) -> T:
        timeout = float(self._opt["connect_timeout"])
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise ConnectionLostError(f"{self.url.redacted}: no answer from the broker to {what} "
                                      f"within {timeout} s") from None

    def _run_work(self) -> None:
        with self._work_lock:
            batch = list(self._work)
            self._work.clear()
            self._wake_pending = False
        for fn in batch:
            try:
                fn()
            except Exception:  # a work item must never stop the container
                log.exception("ackbridge amqp10 work item failed")

    # ---- lifecycle ------------------------------------------------------------------
    def open(self) -> None:
        if self._thread is not None:
            return
        self._container = Container(self._handler)
        self._container.container_id = f"ackbridge-{uuid.uuid4().hex[:12]}"
        self._injector = EventInjector()
        self._container.selectable(self._injector)
        self._thread = threading.Thread(target=self._loop, name="ackbridge-amqp10", daemon=True)
        self._thread.start()
        opening: Future[None] = Future()

        def start(_f: Future[None]) -> None:
            self._opening = opening
            self._connect()

        self._call(start)
        try:
            self._wait(opening, "the connection open")
        except AckbridgeError:
            self._shutdown()
            raise

    def _loop(self) -> None:
        # Container.run() without its fragility: an exception raised while
        # dispatching one event (in proton's own handlers or ours) would end
        # run() and, with it, every link of this transport for good. Here it
        # costs the connection instead: it is dropped and re-made (a new
        # generation), as if the network had failed.
        container = self._container
        assert container is not None
        try:
            container.timeout = 3.14159265359
            container.start()
            while True:
                try:
                    if not container.process():
                        break
                except Exception as exc:
                    self._recover(f"{type(exc).__name__}: {exc}")
            container.stop()
            container.process()
        except Exception as exc:
            log.error("ackbridge amqp10 container stopped: %s", self._scrub(f"{type(exc).__name__}: {exc}"))
        finally:
            self._injector = None

    def _recover(self, what: str) -> None:
        reason = self._scrub(what)
        conn = self._conn
        if conn is None:
            log.debug("ackbridge amqp10: an event handler failed again (%s)", reason)
            return
        log.error("ackbridge amqp10: an event handler failed (%s); dropping the connection", reason)
        for waiter in self._handler.waiters.values():
            if not waiter.done():
                waiter.set_exception(ConnectionLostError(
                    f"{self.url.redacted}: the connection was dropped during the attach ({reason})"))
        self._handler.waiters.clear()
        self._failed(conn, Condition("ackbridge:internal-error", f"event handler failed: {reason}"))
        try:
            conn.close()
        except Exception:
            log.debug("closing the failed connection raised", exc_info=True)

    def _connect(self) -> None:
        assert self._container is not None
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
        mechs = self._opt["sasl_mechanisms"] or ("PLAIN" if url.username else "ANONYMOUS")
        kwargs["allowed_mechs"] = mechs
        if self._opt["heartbeat"]:
            kwargs["heartbeat"] = float(self._opt["heartbeat"])
        if self._opt["hostname"]:
            kwargs["virtual_host"] = self._opt["hostname"]
        if self._tls:
            kwargs["ssl_domain"] = self._ssl_domain()
        self._last_condition = None
        self._conn = self._container.connect(url=f"{scheme}://{url.host}:{port}", **kwargs)

    def _ssl_domain(self) -> SSLDomain:
        if not _ssl_present():
            raise ConfigurationError("amqp10s:// needs proton built with TLS support (SSL not present)")
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        ca = self._opt["ca_file"]
        if ca:
            domain.set_trusted_ca_db(ca)
        if self._opt["verify"]:
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, ca)
        else:
            domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
        if self._opt["cert_file"]:
            domain.set_credentials(self._opt["cert_file"], self._opt["key_file"], None)
        return domain

    def close(self) -> None:
        if self._thread is None or self._injector is None:
            return
        done: Future[None] = Future()

        def begin(_f: Future[None]) -> None:
            self._closing = True
            self._closed_future = done
            for out in list(self._outs.values()):
                self._fail_out(out, unknown("connection closed before the broker answered"))
            self._outs.clear()
            self._out_by_link.clear()
            conn = self._conn
            if conn is None or conn.state & Endpoint.LOCAL_CLOSED:
                done.set_result(None)
                return
            conn.close()

        self._call(begin)
        try:
            done.result(float(self._opt["connect_timeout"]))
        except Exception:
            pass  # the socket is torn down below either way
        self._shutdown()

    def _shutdown(self) -> None:
        def stop() -> None:
            self._closing = True
            if self._live is not None:
                self._live = None
            if self._injector is not None:
                self._injector.close()
            if self._container is not None:
                self._container.stop()

        try:
            self._submit(stop)
        except ConnectionLostError:
            pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None

    # ---- connection events (container thread) -------------------------------------------
    def _opened(self, conn: Any) -> None:
        if not _same(conn, self._conn):
            return
        props = conn.remote_properties or {}
        self.remote_properties = {str(k): v for k, v in props.items()}
        product = self.remote_properties.get("product")
        version = self.remote_properties.get("version")
        self._modified_safe = modified_is_safe(
            str(product) if product is not None else None, str(version) if version is not None else None)
        self._generation += 1
        self._live = self._generation
        self._reconnect_delay = 0.1
        for sub in self._subs.values():
            self._attach(sub)
        if self._inbox is not None:
            self._attach_inbox(self._inbox)
        if self._opening is not None and not self._opening.done():
            self._opening.set_result(None)
        self._opening = None

    def _failed(self, conn: Any, condition: Any) -> None:
        """The connection could not be opened, or it was lost, or the peer closed it."""
        if not _same(conn, self._conn):
            return
        condition = condition or self._last_condition
        reason = self._describe(condition)
        self._conn = None
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done():
            opening.set_exception(self._open_error(condition, reason))
            return
        self._end_generation(f"connection lost: {reason}")
        if self._closing:
            if self._closed_future is not None and not self._closed_future.done():
                self._closed_future.set_result(None)
            return
        if self._opt["reconnect"]:
            delay = self._reconnect_delay
            self._reconnect_delay = min(delay * 2, float(self._opt["reconnect_max_delay"]))
            assert self._container is not None
            self._container.schedule(delay, _Retry(self._reconnect))

    def _reconnect(self) -> None:
        if self._closing or self._conn is not None:
            return
        self._connect()

    def _open_error(self, condition: Any, reason: str) -> AckbridgeError:
        name = getattr(condition, "name", "") or ""
        if name in _AUTH_CONDITIONS:
            return BrokerError(f"{self.url.redacted}: authentication failed for user "
                               f"{self.url.username!r} ({reason})")
        return ConnectionLostError(f"cannot connect to {self.url.redacted}: {reason}")

    def _end_generation(self, reason: str) -> None:
        ended = self._live
        self._live = None
        self._deliveries.clear()
        for sub in self._subs.values():
            sub.receiver = None
        if self._inbox is not None:
            self._inbox.receiver = None
        outs = list(self._outs.values())
        self._outs.clear()
        self._out_by_link.clear()
        for out in outs:
            self._fail_out(out, unknown(reason))
        if ended is not None:
            try:
                self.events.generation_ended(ended, reason)
            except Exception:
                log.exception("generation_ended callback failed")

    def _connection_closed(self, conn: Any) -> None:
        """Both ends closed (our close, answered)."""
        if self._closed_future is not None and not self._closed_future.done():
            self._end_generation("connection closed")
            self._closed_future.set_result(None)

    # ---- queues ---------------------------------------------------------------------------
    def queue_address(self, name: str) -> str:
        address = name if name.startswith("/") else str(self._opt["queue_address"]).format(name=name)
        return codec.check_address(address)

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Attach (and detach) a sender to the queue address, which makes RabbitMQ
        declare it. AMQP 1.0 cannot configure a queue, so ``dead_letter=True``
        raises UnsupportedVerbError: create such queues on the broker."""
        if dead_letter:
            raise UnsupportedVerbError(
                "amqp10", "declare_queue(dead_letter=True)",
                "AMQP 1.0 has no queue management; create the queue with its dead-letter target on the "
                "broker (RabbitMQ: x-dead-letter-exchange argument or a policy), or pass dead_letter=False")
        address = self.queue_address(name)
        self._wait(self._call(lambda f: self._declare(address, f)), f"the attach of {address!r}")

    def _declare(self, address: str, future: Future[None]) -> None:
        conn = self._require_conn()
        assert self._container is not None
        link = self._container.create_sender(_session(conn), address, name=f"declare-{uuid.uuid4().hex[:8]}")
        self._handler.waiters[link] = future
        future.add_done_callback(lambda _f: self._submit(lambda: _close_link(link)))

    def _require_conn(self) -> Any:
        if self._conn is None or self._live is None:
            raise ConnectionLostError(f"{self.url.redacted}: not connected (reconnecting)")
        return self._conn

    # ---- consuming ------------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        self._wait(self._call(lambda f: self._subscribe(subscription, source, prefetch, f)),
                   f"the attach of {source!r}")

    def _subscribe(self, subscription: str, source: str, prefetch: int, future: Future[None]) -> None:
        codec.check_address(source)  # raised through the future to either twin
        self._require_conn()
        sub = _Sub(subscription, source, prefetch, attached=future)
        self._subs[subscription] = sub

        def failed(f: Future[None]) -> None:
            if f.cancelled() or f.exception() is not None:
                self._submit(lambda: self._drop_sub(sub))

        future.add_done_callback(failed)
        self._attach(sub)

    def _attach(self, sub: _Sub) -> None:
        conn = self._conn
        if conn is None or self._container is None:
            return
        receiver = self._container.create_receiver(_session(conn), sub.source, name=f"{sub.name}-g{self._generation}")
        receiver.flow(sub.prefetch)
        sub.held = 0
        sub.credit = sub.prefetch
        sub.receiver = receiver
        self._handler.receivers[receiver] = sub
        if sub.attached is not None and not sub.attached.done():
            self._handler.waiters[receiver] = sub.attached

    def _drop_sub(self, sub: _Sub) -> None:
        if self._subs.get(sub.name) is sub:
            del self._subs[sub.name]
        if sub.receiver is not None:
            self._handler.receivers.pop(sub.receiver, None)
            _close_link(sub.receiver)
            sub.receiver = None
        for tag in [t for t, (_, s, _r) in self._deliveries.items() if s is sub]:
            del self._deliveries[tag]

    def unsubscribe(self, subscription: str) -> None:
        def drop(f: Future[None]) -> None:
            sub = self._subs.get(subscription)
            if sub is not None:
                self._drop_sub(sub)
            f.set_result(None)

        if self._injector is None:
            return
        self._wait(self._call(drop), "unsubscribe")

    def _incoming(self, receiver: Any, delivery: Any, message: Any) -> None:
        sub = self._handler.receivers.get(receiver)
        if sub is None or self._live is None or sub.receiver != receiver:
            # A late transfer on a link we are closing: give it back.
            delivery.update(Delivery.RELEASED)
            delivery.settle()
            return
        tag = next(self._tags)
        self._deliveries[tag] = (delivery, sub, sub.receiver)
        sub.held += 1
        sub.credit -= 1
        if sub.credit < 0:
            # The broker sent more than the credit granted (RabbitMQ 3.x does, now
            # and then). proton's credit is below zero too, and its next flow frame
            # would carry that as an unsigned number (about 4 billion): the broker
            # would send the whole queue. Bring it back to zero at once.
            sub.receiver.flow(-sub.credit)
            sub.credit = 0
        inbound = codec.from_proton(message, wire_tag=tag, generation=self._live, source=sub.source,
                                    count_header=self._count_header)
        self.events.deliver(sub.name, inbound)

    @property
    def _count_header(self) -> bool:
        # Read per message: the capability table is refined once connected.
        caps = self.capabilities
        if caps is not self._count_header_of[0]:
            self._count_header_of = (caps, caps.support(Verb.DELIVERY_COUNT).available)
        return self._count_header_of[1]

    def settle(self, ops: Sequence[WireSettle]) -> None:
        if not ops:
            return
        live = self._live
        stale = [op for op in ops if op.generation != live] if len(ops) > 1 or ops[0].generation != live else None
        if stale:
            raise StaleDeliveryError(
                f"{len(stale)} settlement(s) from connection generation {stale[0].generation} "
                f"(now {self._generation}{'' if live else ', reconnecting'}); nothing was sent and the broker "
                "will redeliver them")
        batch = list(ops)
        if self._on_container():
            self._apply(batch)
        else:
            self._submit(lambda: self._apply(batch))

    def _apply(self, ops: list[WireSettle]) -> None:
        # Credit counted per subscription (hashed by identity) rather than per proton
        # Link wrapper, whose hash is a Python call into the C binding.
        credit: dict[_Sub, int] = {}
        for op in ops:
            if op.generation != self._live:
                continue  # the race was lost to a connection loss: never applied
            found = self._deliveries.pop(op.wire_tag, None)  # type: ignore[call-overload]
            if found is None:
                continue  # its link is gone; the broker returns it
            delivery, sub, receiver = found
            if op.verb is WireVerb.ACK:
                delivery.update(Delivery.ACCEPTED)
            elif op.verb is WireVerb.REJECT:
                delivery.update(Delivery.REJECTED)
            elif self._modified_safe and self._opt["peer"] == "generic":
                delivery.local.failed = True
                delivery.update(Delivery.MODIFIED)
            else:
                delivery.update(Delivery.RELEASED)
            delivery.settle()
            # Identity, not delivery.link (proton wraps a new Link object per read):
            # credit goes back only while the receiver it came on is still the sub's.
            if receiver is not None and sub.receiver is receiver:
                credit[sub] = credit.get(sub, 0) + 1
        for sub, n in credit.items():
            sub.held -= n
            receiver = sub.receiver
            if receiver is None or self._subs.get(sub.name) is not sub or not receiver.state & Endpoint.LOCAL_ACTIVE:
                continue
            grant = credit_to_grant(sub.prefetch, sub.held, sub.credit)
            if grant:
                receiver.flow(grant)
                sub.credit += grant

    # ---- publishing ---------------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        if not destination:
            self.events.confirm(seq, refused("no destination address given"))
            return
        try:
            self._check_address(destination)
        except InvalidOptionError as exc:
            self.events.confirm(seq, refused(f"not sent: {exc}"))
            return
        # Encoded here, on the publishing thread: the container thread only moves
        # bytes, and a message that cannot be encoded is refused alone, at once.
        try:
            data = codec.encode(message)
        except Exception as exc:
            self.events.confirm(seq, refused(f"cannot encode message: {type(exc).__name__}: {exc}"))
            return
        try:
            self._submit(lambda: self._send(seq, destination, data))
        except ConnectionLostError as exc:
            self.events.confirm(seq, unknown(str(exc)))

    def _send(self, seq: int, destination: str, data: bytes) -> None:
        if self._conn is None or self._live is None or self._closing:
            self.events.confirm(seq, unknown("not connected (closing or reconnecting); nothing was sent"))
            return
        out = self._outs.get(destination)
        if out is None:
            out = self._open_out(destination)
        out.pending[seq] = None
        self._seq_out[seq] = out
        # What proton's Message.send does, with the bytes encoded already. The
        # delivery is made through the C binding: Link.delivery wraps it in a
        # Python object (with its own attribute record) that nothing here reads.
        link = out.link
        _pn_delivery(link._impl, str(seq))
        link.stream(data)
        link.advance()

    def _open_out(self, address: str) -> _Out:
        assert self._container is not None
        limit = int(self._opt["max_sender_links"])
        if len(self._outs) >= limit:
            for addr, old in list(self._outs.items()):
                if not old.pending:
                    del self._outs[addr]
                    self._out_by_link.pop(old.link, None)
                    _close_link(old.link)
                    if len(self._outs) < limit:
                        break
        link = self._container.create_sender(_session(self._conn), address, name=f"out-{uuid.uuid4().hex[:12]}")
        out = _Out(address, link)
        self._outs[address] = out
        self._out_by_link[link] = out
        return out

    def _outcome(self, delivery: Any) -> None:
        # Found by tag (our seq, unique per connection), not by delivery.link:
        # proton builds a new Link wrapper on every .link read, a real cost per message.
        try:
            seq = int(delivery.tag)
        except (TypeError, ValueError):
            return
        out = self._seq_out.get(seq)
        if out is None or seq not in out.pending:
            return
        state = delivery.remote_state
        if state == Delivery.ACCEPTED:
            outcome = CONFIRMED
        elif state == Delivery.REJECTED:
            outcome = refused(f"rejected by the broker: {self._describe(delivery.remote.condition)}")
        elif state == Delivery.RELEASED:
            outcome = refused("released by the broker (not delivered to any queue)")
        elif state == Delivery.MODIFIED:
            remote = delivery.remote
            how = "undeliverable here" if remote.undeliverable else "delivery failed"
            outcome = refused(f"modified by the broker ({how})")
        elif delivery.settled:
            outcome = unknown("the broker settled the delivery without an outcome")
        else:
            return  # a non-terminal state (e.g. received): wait for the outcome
        del out.pending[seq]
        del self._seq_out[seq]
        delivery.settle()
        self.events.confirm(seq, outcome)

    def _fail_out(self, out: _Out, outcome: Any) -> None:
        pending, out.pending = list(out.pending), {}
        for seq in pending:
            self._seq_out.pop(seq, None)
            self.events.confirm(seq, outcome)

    def _sender_closed(self, link: Any, condition: Any) -> None:
        out = self._out_by_link.pop(link, None)
        if out is None:
            return
        if self._outs.get(out.address) is out:
            del self._outs[out.address]
        reason = self._describe(condition)
        if not out.credited and condition is not None:
            # Refused at attach: no credit was ever granted, so nothing was transferred.
            self._fail_out(out, refused(f"the broker refused the link to {out.address!r}: {reason}"))
        else:
            self._fail_out(out, unknown(f"link to {out.address!r} closed before the broker answered: {reason}"))

    def _receiver_closed(self, link: Any, condition: Any) -> None:
        sub = self._handler.receivers.pop(link, None)
        if sub is None:
            return
        if sub.receiver == link:
            sub.receiver = None
        for tag in [t for t, (_, _s, r) in self._deliveries.items() if r == link]:
            del self._deliveries[tag]
        if self._subs.get(sub.name) is not sub or self._closing or self._live is None:
            return
        attached = sub.attached
        if attached is not None and attached.done() and (attached.cancelled() or attached.exception() is not None):
            self._drop_sub(sub)  # subscribe() already raised the refusal
            return
        # The broker detached a live subscription (e.g. the queue was deleted): try again later.
        log.warning("amqp10 subscription %s on %r detached by the broker: %s", sub.name, sub.source,
                    self._describe(condition))
        delay = sub.retry_delay
        sub.retry_delay = min(delay * 2, float(self._opt["reconnect_max_delay"]))
        generation = self._live

        def again() -> None:
            if self._subs.get(sub.name) is sub and sub.receiver is None and self._live == generation:
                self._attach(sub)

        assert self._container is not None
        self._container.schedule(delay, _Retry(again))

    # ---- replies --------------------------------------------------------------------------
    def open_reply_inbox(self) -> str:
        return self._wait(self._call(self._open_inbox), "the attach of the reply inbox")

    def _open_inbox(self, future: Future[str]) -> None:
        self._require_conn()
        if self._inbox is not None:
            future.set_result(self._inbox.address)
            return
        template = str(self._opt["inbox"])
        dynamic = template == "dynamic"
        source = "" if dynamic else template.replace("{id}", uuid.uuid4().hex)
        inbox = _Inbox(_reply_address(source), dynamic, source=source, attached=future)

        def failed(f: Future[str]) -> None:
            if f.cancelled() or f.exception() is not None:
                self._submit(lambda: self._drop_inbox(inbox))

        future.add_done_callback(failed)
        self._inbox = inbox
        self._attach_inbox(inbox)

    def _drop_inbox(self, inbox: _Inbox) -> None:
        if self._inbox is inbox:
            self._inbox = None
        if inbox.receiver is not None:
            self._handler.inboxes.pop(inbox.receiver, None)
            _close_link(inbox.receiver)

    def _attach_inbox(self, inbox: _Inbox) -> None:
        if self._conn is None or self._container is None:
            return
        name = f"inbox-{uuid.uuid4().hex[:12]}"
        if inbox.dynamic:
            receiver = self._container.create_receiver(_session(self._conn), None, dynamic=True, name=name)
        else:
            receiver = self._container.create_receiver(_session(self._conn), inbox.source, name=name)
        receiver.flow(100)
        inbox.receiver = receiver
        self._handler.inboxes[receiver] = inbox

    def _inbox_attached(self, receiver: Any) -> None:
        inbox = self._handler.inboxes.get(receiver)
        if inbox is None:
            return
        if inbox.dynamic:
            address = receiver.remote_source.address
            if not address:
                return  # refused: the detach (with its condition) follows
            inbox.address = address
        if inbox.attached is not None and not inbox.attached.done():
            inbox.attached.set_result(inbox.address)

    def _reply(self, receiver: Any, delivery: Any, message: Any) -> None:
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        receiver.flow(1)
        inbound = codec.from_proton(message, wire_tag=0, generation=self._live or self._generation,
                                    source=self._inbox.address if self._inbox else "", count_header=False)
        self.events.reply(inbound)

    # ---- async side: the same operations, futures bridged to asyncio ---------------------
    async def _await(self, future: Future[T], what: str) -> T:
        timeout = float(self._opt["connect_timeout"])
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise ConnectionLostError(f"{self.url.redacted}: no answer from the broker to {what} "
                                      f"within {timeout} s") from None

    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        if dead_letter:
            self.declare_queue(name, dead_letter=True)  # raises UnsupportedVerbError
        address = self.queue_address(name)
        await self._await(self._call(lambda f: self._declare(address, f)), f"the attach of {address!r}")

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        await self._await(self._call(lambda f: self._subscribe(subscription, source, prefetch, f)),
                          f"the attach of {source!r}")

    async def open_reply_inbox_async(self) -> str:
        return await self._await(self._call(self._open_inbox), "the attach of the reply inbox")


def _ssl_present() -> bool:
    from proton import SSL

    return bool(SSL.present())


def _same(a: Any, b: Any) -> bool:
    return a is not None and b is not None and bool(a == b)


def _reply_address(source: str) -> str:
    """The reply-to for an inbox attached at *source*. RabbitMQ: ``/queue/NAME`` as a
    target declares NAME again, so a reply arriving after the inbox is gone would
    re-create it; ``/amq/queue/NAME`` only routes to it (and drops the reply)."""
    if source.startswith("/queue/"):
        return "/amq/queue/" + source[len("/queue/"):]
    return source


def _session(conn: Any) -> Any:
    """Each link gets its own session: brokers end the whole session on some link
    errors (RabbitMQ 3.10: a missing queue, or a 'modified' outcome before
    3.10.11), and that must not take the other subscriptions with it."""
    session = conn.session()
    session.open()
    return session


def _close_link(link: Any) -> None:
    if not link.state & Endpoint.LOCAL_CLOSED:
        link.close()
    session = link.session
    if not session.state & Endpoint.LOCAL_CLOSED:
        session.close()


class _ReceiversOnly(IncomingMessageHandler):
    """proton's incoming-message handler, kept from the sender's deliveries (one per
    publish): it asked each one ``delivery.link.is_receiver``, which builds a new
    Link wrapper every time. ``event.link`` is the one the event built already."""

    def on_delivery(self, event: Any) -> None:
        link = event.link
        if not link.is_receiver:
            return
        delivery = event.delivery
        if delivery.aborted or not delivery.readable or delivery.partial or link.state & Endpoint.LOCAL_CLOSED:
            super().on_delivery(event)  # the rare cases, as proton handles them
            return
        # proton's recv_msg, reading through event.link: it asks delivery.link three
        # times, and each builds a new Link wrapper (~10% of the receive path).
        message = Message()
        message.decode(link.recv(delivery.pending))
        link.advance()
        event.message = message
        self.on_message(event)


class _Handler(MessagingHandler):
    """proton callbacks, all on the container thread; each delegates to the transport."""

    def __init__(self, transport: Amqp10Transport) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        # Outcomes of publishes are taken straight from the delivery event
        # (on_delivery below) instead of through proton's OutgoingMessageHandler,
        # which read the delivery's state up to five times and built a new Link
        # wrapper for each publish before calling on_accepted and on_settled.
        children = cast("list[Any]", self.handlers)  # a list once MessagingHandler.__init__ ran
        self.handlers = [_ReceiversOnly(h.auto_accept, h.delegate) if isinstance(h, IncomingMessageHandler) else h
                         for h in children if not isinstance(h, OutgoingMessageHandler)]
        self.t = transport
        self.receivers: dict[Any, _Sub] = {}
        self.inboxes: dict[Any, _Inbox] = {}
        self.waiters: dict[Any, Future[Any]] = {}

    def on_ackbridge_work(self, event: Any) -> None:
        self.t._run_work()

    # -- connection
    def on_connection_opened(self, event: Any) -> None:
        self.t._opened(event.connection)

    def on_transport_error(self, event: Any) -> None:
        # Do not log here: MessagingHandler's default would print the condition unscrubbed.
        self.t._last_condition = event.transport.condition

    def on_disconnected(self, event: Any) -> None:
        self.t._failed(event.connection, event.transport.condition if event.transport else None)

    def on_connection_error(self, event: Any) -> None:
        conn = event.connection
        self.t._failed(conn, conn.remote_condition)
        conn.close()

    def on_connection_closing(self, event: Any) -> None:
        conn = event.connection
        self.t._failed(conn, conn.remote_condition or Condition("amqp:connection:forced", "closed by the broker"))
        conn.close()

    def on_connection_closed(self, event: Any) -> None:
        self.t._connection_closed(event.connection)

    def on_session_error(self, event: Any) -> None:
        self._session_gone(event)

    def on_session_closing(self, event: Any) -> None:
        self._session_gone(event)

    def _session_gone(self, event: Any) -> None:
        # One link per session (see _session): the session's end is its link's end.
        session = event.session
        condition = session.remote_condition or Condition("amqp:session:ended", "session ended by the broker")
        links = [*self.receivers, *self.inboxes, *self.waiters, *self.t._out_by_link]
        for link in {id(k): k for k in links if k.session == session}.values():
            self._link_gone(link, condition)
        if not session.state & Endpoint.LOCAL_CLOSED:
            session.close()

    # -- links
    def on_link_opened(self, event: Any) -> None:
        link = event.link
        if link.is_receiver:
            if link in self.inboxes:
                self.t._inbox_attached(link)
                return
            if link.remote_source is None or (not link.remote_source.address and not link.remote_source.dynamic):
                return  # a null source means refused: the detach with its condition follows
        elif link.remote_target is None or not link.remote_target.address:
            return
        waiter = self.waiters.pop(link, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if link in self.receivers:
            self.receivers[link].retry_delay = 0.1

    def on_link_error(self, event: Any) -> None:
        self._link_gone(event.link, event.link.remote_condition)

    def on_link_closing(self, event: Any) -> None:
        self._link_gone(event.link, event.link.remote_condition)

    def _link_gone(self, link: Any, condition: Any) -> None:
        waiter = self.waiters.pop(link, None)
        if waiter is not None and not waiter.done():
            what = "source" if link.is_receiver else "target"
            address = link.source.address if link.is_receiver else link.target.address
            waiter.set_exception(BrokerError(
                f"{self.t.url.redacted}: the broker refused the link to {what} {address!r}: "
                f"{self.t._describe(condition)}"))
        inbox = self.inboxes.pop(link, None)
        if inbox is not None:
            if inbox.attached is not None and not inbox.attached.done():
                inbox.attached.set_exception(BrokerError(
                    f"{self.t.url.redacted}: the broker refused the reply inbox: {self.t._describe(condition)}"))
            if inbox.receiver == link:
                inbox.receiver = None
        if link.is_sender:
            self.t._sender_closed(link, condition)
        else:
            self.t._receiver_closed(link, condition)
        _close_link(link)

    def on_link_closed(self, event: Any) -> None:
        link = event.link
        if link.is_sender:
            self.t._sender_closed(link, None)
        else:
            self.t._receiver_closed(link, None)

    # -- deliveries
    def on_message(self, event: Any) -> None:
        link = event.receiver
        if link in self.inboxes:
            self.t._reply(link, event.delivery, event.message)
        else:
            self.t._incoming(link, event.delivery, event.message)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if (link.is_sender and link.credit and link.state & Endpoint.LOCAL_ACTIVE
                and link.state & Endpoint.REMOTE_ACTIVE):
            out = self.t._out_by_link.get(link)
            if out is not None:
                out.credited = True

    def on_delivery(self, event: Any) -> None:
        # Receivers' deliveries are IncomingMessageHandler's (it calls on_message).
        # event.link is the wrapper the event built already; delivery.link would be a new one.
        if event.link.is_sender:
            self.t._outcome(event.delivery)


__all__ = ["OPTIONS", "Amqp10Transport", "credit_to_grant", "modified_is_safe"]
