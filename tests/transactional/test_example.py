"""examples/consume_transform_publish.py runs as documented (embedded broker, SQLite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_consume_transform_publish_example(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "consume_transform_publish.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("50 orders invoiced, 3 copies acked without effect; totals rows 50 (50 distinct); "
            "50 invoices published (50 waiting on 'invoices')") in done.stdout
