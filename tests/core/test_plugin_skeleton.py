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
