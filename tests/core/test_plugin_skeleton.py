"""Every plugin package has the same skeleton: the same file names for the same jobs.

A newcomer who knows one plugin finds their way in the others: registration in
``plugin.py``, declared capabilities in ``capabilities.py``, options in ``options.py``,
the transport in ``connection.py``, consuming and settling in ``receiving.py``,
publishing and confirms in ``sending.py``, the wire format in ``codec.py`` and the
driver's errors mapped in ``errors.py``. Other files each hold one more job.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKELETON = ("plugin.py", "capabilities.py", "options.py", "connection.py", "receiving.py", "sending.py",
            "codec.py", "errors.py")
PACKAGES = sorted(init.parent for init in ROOT.glob("plugins/*/ackbridge_*/__init__.py"))


def test_every_plugin_is_found() -> None:
    assert len(PACKAGES) == 6, PACKAGES


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_plugin_has_the_skeleton(package: Path) -> None:
    missing = [name for name in SKELETON if not (package / name).is_file()]
    assert not missing, f"{package.relative_to(ROOT)} lacks {missing}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_plugin_modules_stay_small(package: Path) -> None:
    long = {p.name: n for p in package.glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_module_over_400_lines_in_the_core_the_plugins_or_the_connector() -> None:
    """Small modules with one job each: a module past 400 lines is split by job."""
    trees = [ROOT / "ackbridge", ROOT / "spark_connector" / "ackbridge_spark", *PACKAGES]
    long = {str(p.relative_to(ROOT)): n for tree in trees for p in tree.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_rules_are_not_restated_at_the_edge() -> None:
    """Issue 33's lines, kept: production code reaches into no test kit or CLI; no plugin
    decides staleness itself (the core's generations rule words every stale error); one
    tls_context; the core's observability names no client library."""
    import re

    def sources(*folders: str) -> list[Path]:
        return [p for folder in folders for p in (ROOT / folder).rglob("*.py") if ".egg-info" not in str(p)]

    plugin_code = [p for p in sources("plugins") if "/tests/" not in str(p)]
    reaching = [str(p) for p in [*sources("spark_connector/ackbridge_spark"), *plugin_code]
                if re.search(r"ackbridge\.(testing|cli)\b", p.read_text())]
    assert not reaching, reaching
    deciding = [str(p) for p in plugin_code if re.search(r"raise stale_error|StaleDeliveryError\(", p.read_text())]
    assert not deciding, deciding
    contexts = [str(p) for p in [*sources("ackbridge"), *plugin_code] if "def tls_context" in p.read_text()]
    assert len(contexts) == 1, contexts
    naming = [str(p) for p in (ROOT / "ackbridge/observability").glob("*.py")
              if re.search(r"\b(pika|paho|proton|nats|rstream)\b",
                           "\n".join(line for line in p.read_text().splitlines() if not line.lstrip().startswith("#")))]
    assert not naming, naming
