"""The examples that need no server run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_consume_with_handler_example(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "consume_with_handler.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "96 orders handled and acked; 4 malformed ones dead-lettered to orders.dlq" in done.stdout
    # The handler's exception is logged with the message it was raised on.
    assert "ackbridge handler raised on a message from 'orders' (id 'order-0'); rejected it" in done.stderr
