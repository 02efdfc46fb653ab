"""Plugins come only through the entry-point group; one broken plugin breaks nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ackbridge-memory-plugin"
ACKBRIDGE = Path(sys.executable).with_name("ackbridge")


def _run(args: list[str], extra_path: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(extra_path), COLUMNS="200")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(EXAMPLE)], check=True, capture_output=True, timeout=300)
    return target


def test_example_plugin_installs_and_serves_its_scheme(installed_example: Path) -> None:
    listing = _run([str(ACKBRIDGE), "plugins"], installed_example)
    assert listing.returncode == 0, listing.stderr
    assert "memory" in listing.stdout and "memory://" in listing.stdout
    script = (
        "import ackbridge\n"
        "c = ackbridge.connect('memory://demo')\n"
        "print(c.publish('q', b'hello').result().status.value)\n"
        "first = c.consume('q')\n"
        "d = first.get(timeout=5)\n"
        "print(d.body.decode())\n"
        "try:\n"
        "    d.reject()\n"
        "except ackbridge.UnsupportedVerbError as e:\n"
        "    print('unsupported:', e)\n"
        "d.ack()\n"
        "print(d.state.value)\n"
        "first.close()  # a consumer left open would compete for what follows\n"
        "from ackbridge.testing.faults import faults\n"
        "c.publish('q', b'again').result()\n"
        "second = c.consume('q')\n"
        "d = second.get(timeout=5)\n"
        "faults(c).sever('example cut')\n"
        "try:\n"
        "    d.ack()\n"
        "except ackbridge.StaleDeliveryError:\n"
        "    print('stale after sever')\n"
        "second.close()\n"
        "import asyncio\n"
        "async def main():\n"
        "    a = await ackbridge.connect_async('memory://demo')\n"
        "    got = await (await a.consume('q')).get(timeout=5)\n"
        "    await got.ack()\n"
        "    print('async', got.body.decode(), got.state.value)\n"
        "asyncio.run(main())\n"
    )
    run = _run([sys.executable, "-c", script], installed_example)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "confirmed", "hello",
        "unsupported: memory does not support 'reject': the memory broker has no dead-letter queue",
        "acked", "stale after sever", "async again acked",
    ]


def _broken_distribution(site: Path) -> None:
    info = site / "ackbridge_broken-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ackbridge-broken\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[ackbridge]\nbroken = ackbridge_no_such_module_xyz\n")
    (info / "RECORD").write_text("")


def test_broken_plugin_is_reported_and_others_keep_working(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    listing = _run([str(ACKBRIDGE), "plugins"], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "broken" in listing.stdout and "failed" in listing.stdout
    assert "ModuleNotFoundError" in listing.stdout
    assert "local" in listing.stdout
    db = tmp_path / "b.db"
    run = _run([sys.executable, "-c",
                f"import ackbridge; c = ackbridge.connect('local://{db}'); "
                "print(c.publish('q', b'x').result().status.value); c.close()"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "confirmed"


def test_registry_isolates_a_plugin_whose_hook_raises() -> None:
    from ackbridge.hookspecs import hookimpl
    from ackbridge.plugins import Registry

    class Exploding:
        @hookimpl
        def ackbridge_register_adapters(self, register: object) -> None:
            raise RuntimeError("boom at registration")

    reg = Registry()
    reg.add_entry_point("exploding", "tests:Exploding", Exploding())
    reg.load_entry_points()
    statuses = {s.name: s for s in reg.statuses}
    assert not statuses["exploding"].ok and "boom at registration" in statuses["exploding"].error
    assert statuses["local"].ok
    assert reg.adapter("local").name == "embedded"
