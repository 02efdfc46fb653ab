"""The docs site (mkdocs + mkdocstrings) builds in strict mode: a broken link, a
missing page or an API name mkdocstrings cannot render fails the build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_site_builds_strict(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("connect_async", "delete_queue", "inspect_queue", "process", "QueueInfo"):
        assert name in api, name
    assert (tmp_path / "site" / "scoreboard.png").exists()
