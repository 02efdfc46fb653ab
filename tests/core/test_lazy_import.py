"""``import ackbridge`` loads its public names on first use (PEP 562).

Spark starts new Python processes for each query; those that only plan or read
a write-ahead file need a leaf module (errors, files, offset_log), not the
clients, asyncio or the plugin registry.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import ackbridge

HEAVY = ("ackbridge.sync.connection", "ackbridge.aio.connection", "ackbridge.plugins", "ackbridge.transport.base",
         "asyncio")


def _loaded_after(statement: str) -> set[str]:
    code = f"{statement}\nimport sys\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", [
    "import ackbridge",
    "from ackbridge.errors import DataLossError",
    "from ackbridge.transport.offset_log import OffsetLog",
    pytest.param("import ackbridge_spark.datasource", marks=pytest.mark.spark),  # needs pyspark
])
def test_a_leaf_import_loads_no_client(statement: str) -> None:
    loaded = _loaded_after(statement)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_every_exported_name_resolves_to_its_module() -> None:
    for name in ackbridge.__all__:
        value = getattr(ackbridge, name)
        assert getattr(value, "__name__", name) == name, name
    assert callable(ackbridge.connect), "connect is the function, not the submodule of that name"
    assert set(ackbridge.__all__) <= set(dir(ackbridge))


def test_connect_stays_the_function_after_its_module_is_imported() -> None:
    loaded = _loaded_after("import ackbridge, ackbridge.connect, ackbridge.sync.connection\n"
                           "assert callable(ackbridge.connect), ackbridge.connect\n"
                           "assert ackbridge.Connection is ackbridge.sync.connection.Connection")
    assert "ackbridge.sync.connection" in loaded


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Conection'"):
        ackbridge.Conection  # noqa: B018
