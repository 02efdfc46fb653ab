"""``connect`` / ``connect_async``: pick the adapter by URL scheme, check options."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec

from ackbridge.errors import ConfigurationError

if TYPE_CHECKING:
    from ackbridge.aio.connection import AsyncConnection
    from ackbridge.plugins import AdapterSpec
    from ackbridge.sync.connection import Connection
    from ackbridge.urls import BrokerURL

P = ParamSpec("P")


def resolve(url: str, options: Mapping[str, Any]) -> tuple[BrokerURL, AdapterSpec, dict[str, Any], dict[str, Any]]:
    """Parse *url*, find its adapter, and split and check every option.

    URL query parameters are options too; keyword arguments win over them.
    """
    # Imported here: ``import ackbridge`` binds connect(), and a process that needs
    # only a leaf module (a Spark worker) should not pay for the plugin registry.
    from ackbridge.options import CONNECTION_OPTIONS, CORE_OPTIONS, resolve_options
    from ackbridge.plugins import registry
    from ackbridge.urls import parse_url

    parsed = parse_url(url)
    spec = registry().adapter(parsed.scheme)
    given: dict[str, Any] = dict(parsed.query)
    given.update(options)
    core_names = {s.name for s in CORE_OPTIONS}
    own_specs = spec.option_specs
    clash = (core_names | {s.name for s in CONNECTION_OPTIONS}) & {s.name for s in own_specs}
    if clash:
        raise ConfigurationError(f"adapter {spec.name} redefines core option(s) {sorted(clash)}")
    # Shared connection options reach the transport resolved, beside its own.
    transport_specs = tuple(CONNECTION_OPTIONS) + tuple(own_specs)
    core_given = {k: v for k, v in given.items() if k in core_names}
    rest = {k: v for k, v in given.items() if k not in core_names}
    owner = f"{spec.name} ({parsed.scheme}://)"
    all_specs = tuple(CORE_OPTIONS) + tuple(transport_specs)
    # Check unknown names against every option, so "did you mean" sees them all.
    resolve_options(all_specs, {k: v for k, v in given.items()}, owner=owner)
    core = resolve_options(CORE_OPTIONS, core_given, owner=owner)
    transport = resolve_options(transport_specs, rest, owner=owner)
    return parsed, spec, core, transport


def _given(named: Mapping[str, Any], plugin_options: Mapping[str, Any]) -> dict[str, Any]:
    """The options the caller gave: None means "not given" (the URL's query or the default)."""
    given = {k: v for k, v in named.items() if v is not None}
    given.update(plugin_options)
    return given


def _options_of(
    sync: Callable[P, Connection],
) -> Callable[[Callable[..., Coroutine[Any, Any, AsyncConnection]]], Callable[P, Coroutine[Any, Any, AsyncConnection]]]:
    """Give the decorated coroutine function the parameters of *sync*, for type
    checkers (through ParamSpec) and for help() (through ``__signature__``)."""

    def adopt(
        fn: Callable[..., Coroutine[Any, Any, AsyncConnection]],
    ) -> Callable[P, Coroutine[Any, Any, AsyncConnection]]:
        fn.__signature__ = inspect.signature(sync).replace(  # type: ignore[attr-defined]
            return_annotation="AsyncConnection")
        return fn

    return adopt


def connect(
    url: str,
    *,
    prefetch: int | None = None,
    conflate_count: int | None = None,
    conflate_ms: float | None = None,
    window: int | None = None,
    confirm_timeout: float | None = None,
    max_deliveries: int | None = None,
    connect_timeout: float | None = None,
    heartbeat: float | None = None,
    reconnect: bool | None = None,
    reconnect_max_delay: float | None = None,
    tls_verify: bool | None = None,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    **plugin_options: Any,
) -> Connection:
    """Open a sync connection to the broker at *url* (its scheme picks the plugin).

    Args:
        url: ``amqp://``, ``mqtt://``, ``amqp10://``, ``local://PATH`` ... (query
            parameters are options too; keywords win over them).
        prefetch: unsettled deliveries the broker may hand one consumer (100).
        conflate_count: flush wire acks after this many deliveries are acked (1).
        conflate_ms: flush wire acks at least this often, in ms (0: no timer).
        window: unconfirmed publishes before ``publish()`` waits (1000).
        confirm_timeout: seconds before a pending confirm is reported unknown (30).
        max_deliveries: dead-letter a message delivered more often (None: no limit).
        connect_timeout: seconds to wait for the connection (and a subscribe) (10).
        heartbeat: seconds between heartbeats / keepalives (30; 0 disables where allowed).
        reconnect: reopen with back-off and re-subscribe after a loss (True).
        reconnect_max_delay: longest back-off between reconnect attempts, s (10).
        tls_verify: TLS schemes: verify the broker's certificate and host name (True).
        tls_ca_file: TLS schemes: PEM file of CA certificates to trust.
        tls_cert_file: TLS schemes: client certificate (PEM).
        tls_key_file: TLS schemes: client private key (PEM).
        **plugin_options: the plugin's own options (``ackbridge plugins`` lists them);
            an unknown name raises InvalidOptionError with a "did you mean".
    """
    # First statement: every local is a named option (None: "not given").
    named = {k: v for k, v in locals().items() if k not in ("url", "plugin_options")}
    from ackbridge.sync.connection import Connection

    parsed, spec, core, transport = resolve(url, _given(named, plugin_options))
    if spec.sync_transport is None:
        raise ConfigurationError(f"adapter {spec.name} has no sync transport; use connect_async()")
    return Connection(parsed, spec.sync_transport, core, transport, messaging_system=spec.messaging_system or spec.name,
                      client_loggers=spec.client_loggers).open()


@_options_of(connect)
async def connect_async(url: str, **options: Any) -> AsyncConnection:
    """Open an asyncio connection to the broker at *url*; it takes the options of
    :func:`connect` (declared there once; type checkers see them here too)."""
    from ackbridge.aio.connection import AsyncConnection

    parsed, spec, core, transport = resolve(url, _given(options, {}))
    connection = AsyncConnection(parsed, spec.async_type(), core, transport,
                                 messaging_system=spec.messaging_system or spec.name,
                                 client_loggers=spec.client_loggers)
    await connection.open()
    return connection
