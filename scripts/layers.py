"""Draw the layers from the code: which room imports which, as a Mermaid figure.

A room is a folder a newcomer would name: the core's public top level and each of
its subpackages, each plugin, and each read mode of the Spark connector. An edge
A --> B means some module of A imports a module of B (counted once, however many
imports). The figure in docs/plugins.md sits between the two markers below and is
rewritten by ``python scripts/layers.py --write``; ``--check`` (run by
tests/docs/test_layers_figure.py) fails when the code moved and the figure did not.

Imports inside ``if TYPE_CHECKING:`` count too: a type is a dependency a reader
must know about.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plugins.md"
BEGIN, END = "<!-- layers:begin (scripts/layers.py --write) -->", "<!-- layers:end -->"

#: Where each distribution's packages live: (import prefix, source folder, room label prefix).
CORE = ("ackbridge", ROOT / "ackbridge")
CONNECTOR = ("ackbridge_spark", ROOT / "spark_connector" / "ackbridge_spark")
#: Core rooms outside the figure: the test kit and the CLI serve people, not the layers.
LEFT_OUT = {"ackbridge/testing", "ackbridge/cli"}


def plugin_packages() -> dict[str, Path]:
    return {init.parent.name: init.parent for init in sorted(ROOT.glob("plugins/*/ackbridge_*/__init__.py"))}


def room_of(module: str, front_doors: set[str]) -> str | None:
    """The room a dotted module name belongs to, or None outside the project. A
    package's top-level module that imports one of its own subpackages is its front
    door (``ackbridge.connect``); the others are the vocabulary the floors share."""
    parts = module.split(".")
    for package, folder, label in ((*CORE, "ackbridge"), (*CONNECTOR, "spark")):
        if parts[0] != package:
            continue
        if len(parts) > 1 and (folder / parts[1]).is_dir():
            return f"{label}/{parts[1]}"
        top = ".".join(parts[:2])
        if top in front_doors and parts[1:2] != ["__init__"]:
            return f"{label} front door"
        return f"{label} vocabulary"
    if parts[0] in plugin_packages():
        return f"plugin {parts[0].removeprefix('ackbridge_')}"
    return None


#: The floors above the vocabulary: a top-level module importing one of them is a front door.
UPPER_FLOORS = {"ackbridge": ("engine", "sync", "aio"), "ackbridge_spark": ("push", "log", "fetch")}


def front_doors() -> set[str]:
    """Top-level modules of the core and the connector that import their upper floors."""
    found = set()
    for package, folder in (CORE, CONNECTOR):
        subpackages = UPPER_FLOORS[package]
        for path in folder.glob("*.py"):
            module = package if path.stem == "__init__" else f"{package}.{path.stem}"
            if any(name.split(".")[:2] in ([package, sub] for sub in subpackages)
                   for name in imported(module, path)):
                found.add(module)
    return found


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of the core, the plugins and the connector."""
    roots = [CORE, CONNECTOR, *plugin_packages().items()]
    for package, folder in roots:
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder).with_suffix("")
            parts = [package, *relative.parts]
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def imported(module: str, path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from ackbridge import errors`` imports the module ackbridge.errors, not the front door.
                if is_module(f"{source}.{alias.name}"):
                    yield f"{source}.{alias.name}"
                elif alias.name.startswith("__"):
                    yield f"{source}.__init__"  # __version__ and the like: package metadata, not the facade
                else:
                    yield source


def is_module(dotted: str) -> bool:
    parts = dotted.split(".")
    for package, folder in (CORE, CONNECTOR, *plugin_packages().items()):
        if parts[0] == package:
            path = folder.joinpath(*parts[1:])
            return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    return False


def edges() -> dict[str, set[str]]:
    doors = front_doors()
    found: dict[str, set[str]] = {}
    for module, path in modules():
        source = room_of(module, doors)
        if source is None or source in LEFT_OUT:
            continue
        found.setdefault(source, set())
        for name in imported(module, path):
            target = room_of(name, doors)
            if target is not None and target != source and target not in LEFT_OUT:
                found[source].add(target)
    return merged_plugins(found)


def merged_plugins(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Plugins that import the same rooms drawn as one node: the figure shows the rule
    they share, and a plugin that breaks ranks stands out as a node of its own."""
    by_targets: dict[frozenset[str], list[str]] = {}
    for room, targets in graph.items():
        if room.startswith("plugin "):
            by_targets.setdefault(frozenset(targets), []).append(room.removeprefix("plugin "))
    merged = {room: targets for room, targets in graph.items() if not room.startswith("plugin ")}
    for targets, names in by_targets.items():
        merged[("plugin " if len(names) == 1 else "plugins ") + ", ".join(sorted(names))] = set(targets)
    return merged


def node_id(room: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in room)


def figure() -> str:
    graph = edges()
    lines = ["```mermaid", "flowchart TD"]
    groups = {"core": [r for r in graph if r.startswith("ackbridge")],
              "plugins": [r for r in graph if r.startswith("plugin")],
              "spark connector": [r for r in graph if r.startswith("spark")]}
    for title, rooms in groups.items():
        lines.append(f'    subgraph {node_id(title)}["{title}"]')
        lines.extend(f'        {node_id(room)}["{room}"]' for room in sorted(rooms))
        lines.append("    end")
    for source in sorted(graph):
        lines.extend(f"    {node_id(source)} --> {node_id(target)}" for target in sorted(graph[source]))
    lines.append("```")
    return "\n".join(lines)


def spliced(text: str) -> str:
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{DOC} lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{figure()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite the figure in {DOC.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the figure in the doc is not current")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print(figure())
        return 0
    text = DOC.read_text(encoding="utf-8")
    new = spliced(text)
    if args.check:
        if new != text:
            print(f"{DOC.relative_to(ROOT)}: the layer figure is out of date: run python scripts/layers.py --write",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
