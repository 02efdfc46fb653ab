"""Install the example third-party plugin the way a user would, for this package's tests only.

``examples/ackbridge-memory-plugin`` is not installed in the project's venv. Its files
are copied (sources only: no build/ or egg-info left from earlier builds) and
``pip install --no-deps --target``-ed into a temporary folder once per session, so
nothing under examples/ is written. For each test module that folder goes on
``sys.path`` and the core's registry is reset, so ``memory://`` is found the ordinary
way: through the ``ackbridge`` entry-point group of the installed distribution. On
teardown the folder, the imported module and the registry are dropped again, so no
other test module sees the plugin.

``ACKBRIDGE_EXAMPLE_PLUGIN_DIR`` installs another copy of the plugin instead (to show
that the suite fails on a broken one without touching examples/).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackbridge.plugins import registry, reset_registry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(os.environ.get("ACKBRIDGE_EXAMPLE_PLUGIN_DIR", ROOT / "examples" / "ackbridge-memory-plugin"))
PACKAGE = "ackbridge_memory"


@pytest.fixture(scope="session")
def memory_plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("memory-plugin-src") / "ackbridge-memory-plugin"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = tmp_path_factory.mktemp("memory-plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(source)],
                   check=True, capture_output=True, timeout=300)
    return site


@pytest.fixture(scope="module", autouse=True)
def memory_plugin(memory_plugin_site: Path) -> Iterator[None]:
    assert PACKAGE not in sys.modules, "ackbridge_memory was imported before its test package installed it"
    sys.path.insert(0, str(memory_plugin_site))
    reset_registry()
    try:
        spec = registry().adapter("memory")
        assert spec.plugin == "memory", spec  # registered by the distribution's entry point
        assert Path(sys.modules[PACKAGE].__file__ or "").is_relative_to(memory_plugin_site)
        yield
    finally:
        sys.path.remove(str(memory_plugin_site))
        sys.modules.pop(PACKAGE, None)
        reset_registry()
