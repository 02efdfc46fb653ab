"""`ackbridge consume --metrics-port N` serves Prometheus text, scraped over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import ackbridge
from tests.local.harness import LocalHarness

ROOT = Path(__file__).parent.parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(url: str, want: str, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
            if want in text:
                return text
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{want!r} not served at {url} within {timeout} s; last scrape:\n{text[-2000:]}")


def test_consume_serves_metrics_over_http(tmp_path: Path) -> None:
    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url()) as conn:
            for i in range(3):
                conn.publish(queue, f"m{i}".encode()).result(timeout=30)
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "ackbridge", "consume", harness.url(), "--queue", queue,
                                    "-n", "10", "--idle", "60", "--json", "--metrics-port", str(port)],
                                   cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            text = scrape(f"http://127.0.0.1:{port}/metrics", 'messaging_operation_name="ack"')
        finally:
            process.terminate()
            process.communicate(timeout=30)
        settled = [line for line in text.splitlines()
                   if line.startswith("ackbridge_settled_total{") and 'messaging_operation_name="ack"' in line]
        assert len(settled) == 1 and settled[0].endswith(" 3.0"), settled
        assert f'messaging_destination_name="{queue}"' in settled[0]
        assert 'messaging_system="ackbridge_local"' in settled[0]
        assert "ackbridge_settle_duration_seconds_bucket" in text
        assert "ackbridge_unsettled" in text
    finally:
        harness.cleanup()


def test_serve_helper_and_close() -> None:
    from ackbridge.observability.prometheus import serve

    server = serve(0)
    try:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert response.status == 200
    finally:
        server.close()
