"""``connect`` / ``connect_async``: pick the adapter by URL scheme, check options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ackbridge.errors import ConfigurationError
from ackbridge.options import CORE_OPTIONS, resolve_options
from ackbridge.plugins import AdapterSpec, registry
from ackbridge.urls import BrokerURL, parse_url

if TYPE_CHECKING:
    from ackbridge.aclient import AsyncConnection
    from ackbridge.client import Connection


def resolve(url: str, options: Mapping[str, Any]) -> tuple[BrokerURL, AdapterSpec, dict[str, Any], dict[str, Any]]:
    """Parse *url*, find its adapter, and split and check every option.

    URL query parameters are options too; keyword arguments win over them.
    """
    parsed = parse_url(url)
    spec = registry().adapter(parsed.scheme)
    given: dict[str, Any] = dict(parsed.query)
    given.update(options)
    core_names = {s.name for s in CORE_OPTIONS}
    transport_specs = spec.transport.option_specs
    clash = core_names & {s.name for s in transport_specs}
    if clash:
        raise ConfigurationError(f"adapter {spec.name} redefines core option(s) {sorted(clash)}")
    core_given = {k: v for k, v in given.items() if k in core_names}
    rest = {k: v for k, v in given.items() if k not in core_names}
    owner = f"{spec.name} ({parsed.scheme}://)"
    all_specs = tuple(CORE_OPTIONS) + tuple(transport_specs)
    # Check unknown names against every option, so "did you mean" sees them all.
    resolve_options(all_specs, {k: v for k, v in given.items()}, owner=owner)
    core = resolve_options(CORE_OPTIONS, core_given, owner=owner)
    transport = resolve_options(transport_specs, rest, owner=owner)
    return parsed, spec, core, transport


def connect(url: str, **options: Any) -> Connection:
    """Open a sync connection to the broker at *url* (its scheme picks the plugin)."""
    from ackbridge.client import Connection

    parsed, spec, core, transport = resolve(url, options)
    if not spec.transport.supports_sync:
        raise ConfigurationError(f"adapter {spec.name} has no sync transport; use connect_async()")
    return Connection(parsed, spec.transport, core, transport).open()


async def connect_async(url: str, **options: Any) -> AsyncConnection:
    """Open an asyncio connection to the broker at *url*."""
    from ackbridge.aclient import AsyncConnection

    parsed, spec, core, transport = resolve(url, options)
    if not spec.transport.supports_async:
        raise ConfigurationError(f"adapter {spec.name} has no async transport; use connect()")
    connection = AsyncConnection(parsed, spec.transport, core, transport)
    await connection.open()
    return connection
