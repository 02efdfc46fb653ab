"""pluggy hook specifications. Every hook is named ``ackbridge_*``, is called
with keyword arguments only, and grows by adding arguments, never changing them.

A plugin is a module (or object) listed under the ``ackbridge`` entry-point
group that implements some of these hooks with :data:`hookimpl`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ackbridge.plugins import AdapterSpec

PROJECT = "ackbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    """Register broker adapters by calling ``register(AdapterSpec(...))`` once per scheme set."""


@hookspec
def ackbridge_register_commands(register: Callable[..., None]) -> None:
    """Add CLI commands: ``register(name, function, help=...)`` where *function* is a
    typer-style command (type-annotated parameters). A plugin registering ``demo``
    replaces the built-in round-trip demo (the Spark connector does)."""
