"""The layer figure in docs/plugins.md is drawn from the code, and kept current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_layer_figure_matches_the_imports() -> None:
    result = subprocess.run([sys.executable, "scripts/layers.py", "--check"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_no_core_room_imports_a_plugin_or_the_connector() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import layers
    finally:
        sys.path.pop(0)
    graph = layers.edges()
    for room, targets in graph.items():
        if room.startswith("ackbridge"):
            assert not {t for t in targets if not t.startswith("ackbridge")}, (room, targets)
        if room.startswith("plugin"):
            assert all(t.startswith("ackbridge") for t in targets), (room, targets)
