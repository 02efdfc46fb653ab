"""Plugin discovery: the ``ackbridge`` entry-point group, loaded through pluggy.

Each entry point is loaded in isolation: a plugin that fails to import or to
register is recorded with its error (shown by ``ackbridge plugins``) and the
others keep working. The core never imports a plugin by name.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

from ackbridge import hookspecs
from ackbridge.capabilities import Capabilities
from ackbridge.errors import PluginError, UnknownSchemeError
from ackbridge.options import OptionSpec
from ackbridge.transport import AsyncTransport, SyncTransport, ThreadedAsyncTransport

if TYPE_CHECKING:
    from ackbridge.transport.offset_log import OffsetLog
    from ackbridge.urls import BrokerURL

ENTRY_POINT_GROUP = "ackbridge"

#: The extra of the ``ackbridge`` distribution that installs the plugin for a scheme, so
#: the error for a missing one says what to install. The same list as the extras in
#: pyproject.toml (a packaging fact, not a dependency: the core still imports no plugin);
#: an outside plugin's scheme is simply not named.
EXTRA_FOR_SCHEME = {
    "amqp": "rabbitmq", "amqps": "rabbitmq",
    "rabbitmq-stream": "rabbitmq-streams", "rabbitmq-stream+tls": "rabbitmq-streams",
    "mqtt": "mqtt", "mqtts": "mqtt",
    "amqp10": "amqp10", "amqp10s": "amqp10",
    "nats": "nats", "nats+tls": "nats",
}


@dataclass(frozen=True)
class AdapterSpec:
    """What a plugin registers: URL schemes served by a sync transport class,
    an async one, or both. With only a sync class, asyncio is served by the
    core's :class:`~ackbridge.transport.ThreadedAsyncTransport` over it."""

    name: str
    schemes: tuple[str, ...]
    capabilities: Capabilities
    sync_transport: type[SyncTransport] | None = None
    async_transport: type[AsyncTransport] | None = None
    description: str = ""
    #: Extra capability tables for variants chosen by options (e.g. MQTT 3.1.1 vs 5).
    variants: tuple[Capabilities, ...] = ()
    #: Opens an :class:`~ackbridge.transport.offset_log.OffsetLog` (``factory(url, options)``)
    #: where the broker keeps messages in logs read by offset; None where it does not.
    offset_log: Callable[[BrokerURL, dict[str, Any]], OffsetLog] | None = None
    #: OpenTelemetry's ``messaging.system`` for its connections (the convention's
    #: well-known value where it has one, e.g. ``rabbitmq``); empty: the adapter's name.
    messaging_system: str = ""
    #: Top-level logger names of the client libraries it drives (``pika``): ackbridge
    #: keeps their per-connect INFO lines below INFO unless the application set them.
    client_loggers: tuple[str, ...] = ()
    #: Set by the registry: the distribution/entry point that registered it.
    plugin: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.sync_transport is None and self.async_transport is None:
            raise PluginError(f"adapter {self.name!r} registers neither a sync nor an async transport")

    @property
    def option_specs(self) -> tuple[OptionSpec, ...]:
        """The adapter's own options (the shared connection options come from the core)."""
        found = self.sync_transport or self.async_transport
        assert found is not None
        return found.option_specs

    def async_type(self) -> type[AsyncTransport]:
        """The class serving ``connect_async``: the plugin's own, or threads over its sync one."""
        if self.async_transport is not None:
            return self.async_transport
        assert self.sync_transport is not None
        return ThreadedAsyncTransport.over(self.sync_transport)


@dataclass(frozen=True)
class PluginStatus:
    name: str
    value: str
    ok: bool
    error: str = ""
    schemes: tuple[str, ...] = ()


class Registry:
    def __init__(self) -> None:
        self.adapters: dict[str, AdapterSpec] = {}
        self.statuses: list[PluginStatus] = []
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)

    def load_entry_points(self) -> None:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            self.add_entry_point(ep.name, ep.value, ep.load)

    def add_entry_point(self, name: str, value: str, load: object) -> None:
        try:
            module = load() if callable(load) else load
            added = self._register_plugin(name, module)
        except Exception as exc:  # one broken plugin must not break the others
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.statuses.append(PluginStatus(name, value, False, detail))
            return
        self.statuses.append(PluginStatus(name, value, True, schemes=added))

    def _register_plugin(self, name: str, module: object) -> tuple[str, ...]:
        collected: list[AdapterSpec] = []

        def register(spec: AdapterSpec) -> None:
            if not isinstance(spec, AdapterSpec):
                raise PluginError(f"plugin {name!r} registered {type(spec).__name__}, not AdapterSpec")
            collected.append(spec)

        if self.manager.is_registered(module) or self.manager.has_plugin(name):
            return ()
        self.manager.register(module, name=name)
        try:
            impl = self.manager.hook.ackbridge_register_adapters
            for hook in impl.get_hookimpls():
                if hook.plugin_name == name:
                    hook.function(register=register)
            clashes = [s for spec in collected for s in spec.schemes if s in self.adapters]
            if clashes:
                raise PluginError(f"plugin {name!r} registers scheme(s) already taken: {', '.join(clashes)}")
        except Exception:
            self.manager.unregister(module)
            raise
        schemes: list[str] = []
        for spec in collected:
            for scheme in spec.schemes:
                self.adapters[scheme] = dataclasses.replace(spec, plugin=name)
                schemes.append(scheme)
        return tuple(schemes)

    def adapter(self, scheme: str) -> AdapterSpec:
        found = self.adapters.get(scheme)
        if found is not None:
            return found
        close = difflib.get_close_matches(scheme, self.adapters, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = ", ".join(sorted(self.adapters)) or "none"
        broken = [s.name for s in self.statuses if not s.ok]
        extra = f" (plugins that failed to load: {', '.join(broken)}; see `ackbridge plugins`)" if broken else ""
        wanted = EXTRA_FOR_SCHEME.get(scheme)
        install = f"; install it with: pip install 'ackbridge[{wanted}]'" if wanted else ""
        raise UnknownSchemeError(f"no ackbridge plugin serves scheme {scheme!r}{install}{hint} (registered: {known})"
                                 f"{extra}")

    def specs(self) -> Sequence[AdapterSpec]:
        unique: dict[int, AdapterSpec] = {}
        for spec in self.adapters.values():
            unique.setdefault(id(spec.sync_transport or spec.async_transport), spec)
        return list(unique.values())


_registry: Registry | None = None
_lock = threading.Lock()


def registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _registry
    with _lock:
        if _registry is None:
            fresh = Registry()
            fresh.load_entry_points()
            _registry = fresh
        return _registry


def reset_registry() -> None:
    """Forget loaded plugins (tests that install a plugin at run time use this)."""
    global _registry
    with _lock:
        _registry = None
