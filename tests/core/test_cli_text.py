"""What the CLI prints is what it means: help and errors shown as written (rich markup
used to eat ``[prometheus]`` from "needs ackbridge[prometheus]", telling users to install
what they had), and a missing plugin's error names the extra that installs it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from ackbridge.plugins import EXTRA_FOR_SCHEME, registry
from tests.core.test_cli import run

ROOT = Path(__file__).resolve().parents[2]

#: Hides every ackbridge plugin from the CLI's process, as on a machine with only the core.
NO_PLUGINS = '''
import importlib.metadata as md
_entry_points = md.entry_points
def entry_points(**kw):
    return md.EntryPoints(()) if kw.get("group") == "ackbridge" else _entry_points(**kw)
md.entry_points = entry_points
'''


def test_help_shows_extras_and_placeholders_as_written(tmp_path: Path) -> None:
    shown = run("consume", "--help", cwd=tmp_path, columns=200).stdout
    assert "ackbridge[prometheus]" in shown, shown
    # typer 0.29 wraps a required argument in braces, typer 0.16 does not: the name is URL either way.
    assert re.search(r"Usage: ackbridge consume \[OPTIONS\] \{?URL\}?\n", shown), shown
    assert "<bool>" not in shown, shown


def test_a_missing_plugin_names_its_extra_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(NO_PLUGINS)
    result = run("publish", "amqp://guest:S3cretPw@127.0.0.1:5672/", cwd=tmp_path, PYTHONPATH=str(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    text = " ".join(result.stdout.split())  # rich wraps long lines
    assert "pip install 'ackbridge[rabbitmq]'" in text, result.stdout
    assert "S3cretPw" not in result.stdout + result.stderr


def test_every_scheme_of_our_plugins_names_an_extra_that_exists() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_FOR_SCHEME.values()) <= set(extras)
    served = {scheme for spec in registry().specs() for scheme in spec.schemes}
    assert served - {"local", "memory"} <= set(EXTRA_FOR_SCHEME), served - set(EXTRA_FOR_SCHEME)


def test_publish_sends_the_given_body_and_id(tmp_path: Path) -> None:
    import subprocess

    import ackbridge
    from tests.core.test_cli import ACKBRIDGE

    url = f"local://{tmp_path}/body.db"
    given = run("publish", url, "-q", "bodies", "--body", '{"order": [1]}', "--message-id", "order-1", "--json",
                cwd=tmp_path)
    assert given.returncode == 0, given.stdout + given.stderr
    piped = subprocess.run([ACKBRIDGE, "publish", url, "-q", "bodies", "--body", "-"], input=b"\x00raw\xff",
                           cwd=tmp_path, capture_output=True, timeout=120, check=False)
    assert piped.returncode == 0, piped.stdout + piped.stderr
    refused = run("publish", url, "-q", "bodies", "--body", "x", "-n", "2", "--message-id", "a", cwd=tmp_path)
    assert refused.returncode == 2 and "--message-id names one message" in refused.stdout
    with ackbridge.connect(url) as conn:
        consumer = conn.consume("bodies")
        first, second = consumer.get(timeout=10), consumer.get(timeout=10)
        assert first is not None and second is not None
        assert (first.body, first.message_id) == (b'{"order": [1]}', "order-1")
        assert second.body == b"\x00raw\xff"
        first.ack()
        second.ack()
        assert consumer.get(timeout=0.5) is None, "one message per --body"
        consumer.close()


def test_plugins_shows_every_capability_row(tmp_path: Path) -> None:
    import json

    shown = json.loads(run("plugins", "--json", cwd=tmp_path).stdout)
    for adapter in shown["adapters"]:
        for table in adapter["tables"]:
            names = set(table["properties"])
            assert {"confirmed means", "connection-free acks", "extend lease", "delayed retry", "reject does",
                    "source patterns"} <= names, (table["broker"], names)
