"""``python -m ackbridge_spark demo``: the connector's commands without the core CLI.

The core's ``ackbridge`` script mounts the same commands through the
``ackbridge_register_commands`` hook (:mod:`ackbridge_spark.commands`).
"""

from __future__ import annotations

from typing import Any

import typer

from ackbridge_spark.commands import ackbridge_register_commands


def build_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False)

    @app.callback()
    def main() -> None:
        """ackbridge Spark connector commands."""

    def register(name: str, function: Any, help: str | None = None) -> None:
        app.command(name, help=help)(function)

    ackbridge_register_commands(register=register)
    return app


if __name__ == "__main__":
    build_app()()
