"""The CLI end to end on the embedded broker (subprocesses, as a user runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))


def run(*args: str, cwd: Path, columns: int = 200, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS=str(columns), **env_extra)
    return subprocess.run([ACKBRIDGE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_publish_then_consume(tmp_path: Path) -> None:
    url = f"local://{tmp_path}/cli.db"
    published = run("publish", url, "--queue", "cliq", "-n", "300", cwd=tmp_path)
    assert published.returncode == 0, published.stderr
    assert "300" in published.stdout and "confirmed" in published.stdout
    consumed = run("consume", url, "--queue", "cliq", "-n", "300", "--mode", "ack", cwd=tmp_path)
    assert consumed.returncode == 0, consumed.stderr
    row = [line for line in consumed.stdout.splitlines() if "300" in line]
    assert row, consumed.stdout


def test_bad_url_exits_2_without_password(tmp_path: Path) -> None:
    result = run("publish", "nosuch://user:S3cretPw@h/", cwd=tmp_path)
    assert result.returncode == 2
    assert "S3cretPw" not in result.stdout + result.stderr
    assert "no ackbridge plugin serves scheme 'nosuch'" in result.stdout


def test_demo_prints_summary(tmp_path: Path) -> None:
    result = run("demo", "-n", "300", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    for column in ("published", "confirmed", "settled", "redelivered", "duplicates", "lost"):
        assert column in result.stdout, result.stdout


def test_version_and_python_dash_m(tmp_path: Path) -> None:
    assert run("--version", cwd=tmp_path).stdout.strip() == "ackbridge 0.1.0"
    as_module = subprocess.run([sys.executable, "-m", "ackbridge", "--version"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=120, check=False)
    assert as_module.returncode == 0 and as_module.stdout.strip() == "ackbridge 0.1.0"


def test_url_from_environment_and_json(tmp_path: Path) -> None:
    env = {"ACKBRIDGE_URL": f"local://{tmp_path}/env.db"}
    declared = run("declare", "-q", "envq", "--json", cwd=tmp_path, **env)
    assert json.loads(declared.stdout) == {"declared": "envq", "dead_letter": True}
    published = run("publish", "-q", "envq", "-n", "40", "--json", cwd=tmp_path, **env)
    assert published.returncode == 0, published.stdout + published.stderr
    assert json.loads(published.stdout)["confirmed"] == 40
    info = json.loads(run("inspect", "-q", "envq", "--json", cwd=tmp_path, **env).stdout)
    assert info["messages"] == 40 and info["dead_letter"] == "envq.dlq"
    consumed = json.loads(run("consume", "-q", "envq", "-n", "10", "--json", cwd=tmp_path, **env).stdout)
    assert consumed["received"] == 10
    purged = json.loads(run("purge", "-q", "envq", "--json", cwd=tmp_path, **env).stdout)
    assert purged == {"purged": "envq", "messages": 30}
    assert run("delete", "-q", "envq", "--json", cwd=tmp_path, **env).returncode == 0
    plugins = json.loads(run("plugins", "--json", cwd=tmp_path).stdout)
    assert any(p["name"] == "local" and p["ok"] for p in plugins["plugins"])


def test_mode_is_a_choice(tmp_path: Path) -> None:
    result = run("consume", f"local://{tmp_path}/m.db", "--mode", "bogus", cwd=tmp_path)
    assert result.returncode == 2
    assert "'ack'" in result.stderr and "'requeue'" in result.stderr


def test_builtin_roundtrip_demo_deletes_its_queue(tmp_path: Path) -> None:
    from ackbridge.cli import app as cli_app
    from ackbridge.cli.output import console

    url = f"local://{tmp_path}/demo.db"
    with console.capture():
        cli_app.roundtrip_demo(url=url, messages=50, keep=False, as_json=False)
    import ackbridge
    from ackbridge.testing.faults import transport_of

    with ackbridge.connect(url) as conn:
        store = transport_of(conn).store  # type: ignore[attr-defined]
        assert store.totals() == (0, 0)
        assert store._read("SELECT name FROM queues", (), "test") == []


@pytest.mark.spark  # with the Spark connector installed, `demo` is its Spark job (it has --workdir)
def test_demo_at_80_columns_prints_full_headers(tmp_path: Path) -> None:
    result = run("demo", "-n", "200", "--workdir", str(tmp_path / "w"), cwd=tmp_path, columns=80)
    assert result.returncode == 0, result.stdout + result.stderr
    for header in ("published", "confirmed", "written", "settled", "redelivered", "duplicates", "lost",
                   "spark-committed acks"):
        assert header in result.stdout, result.stdout
    assert "…" not in result.stdout, result.stdout
