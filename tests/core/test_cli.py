"""The CLI end to end on the embedded broker (subprocesses, as a user runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
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
