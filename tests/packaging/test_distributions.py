"""What users install: ranges not pins, complete metadata, and wheels that work
installed (non-editable) into a clean venv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.packaging.getting_started import page_program

ROOT = Path(__file__).resolve().parents[2]
PY = Path(sys.executable)
#: Distributions this repository builds (the embedded broker ships inside ``ackbridge``).
OWN = ["pyproject.toml", "plugins/ackbridge-rabbitmq/pyproject.toml", "plugins/ackbridge-mqtt/pyproject.toml",
       "plugins/ackbridge-amqp10/pyproject.toml", "plugins/ackbridge-nats/pyproject.toml",
       "plugins/ackbridge-rabbitmq-streams/pyproject.toml", "spark_connector/pyproject.toml"]
ALL = OWN


def project(path: str) -> dict[str, object]:
    data: dict[str, object] = tomllib.loads((ROOT / path).read_text())["project"]
    return data


@pytest.mark.parametrize("path", ALL)
def test_runtime_dependencies_are_ranges(path: str) -> None:
    deps = project(path).get("dependencies", [])
    assert isinstance(deps, list)
    pinned = [d for d in deps if "==" in d or "===" in d]
    assert not pinned, f"{path} pins {pinned}: exact versions belong in constraints.txt"


@pytest.mark.parametrize("path", OWN)
def test_metadata_is_complete(path: str) -> None:
    meta = project(path)
    assert meta.get("license") == "Apache-2.0"
    assert meta.get("readme") and meta.get("urls") and meta.get("classifiers") and meta.get("description")
    build = tomllib.loads((ROOT / path).read_text())["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in build), build


def test_extras_pull_every_plugin() -> None:
    extras = project("pyproject.toml")["optional-dependencies"]
    assert isinstance(extras, dict)
    for extra, dist in (("rabbitmq", "ackbridge-rabbitmq"), ("mqtt", "ackbridge-mqtt"),
                        ("amqp10", "ackbridge-amqp10"), ("nats", "ackbridge-nats"),
                        ("rabbitmq-streams", "ackbridge-rabbitmq-streams"), ("spark", "ackbridge-spark")):
        assert any(d.startswith(dist) for d in extras[extra]), extra
    assert extras["all"] == ["ackbridge[rabbitmq,mqtt,amqp10,nats,rabbitmq-streams,spark,postgres]"]
    # ackbridge.transactional on PostgreSQL: psycopg 3, a range (sqlite3 needs nothing).
    assert any(d.startswith("psycopg[binary]>=3") for d in extras["postgres"]), extras["postgres"]


def test_spark_connector_asks_for_spark_4() -> None:
    deps = project("spark_connector/pyproject.toml")["dependencies"]
    assert "pyspark>=4.0,<5" in deps  # type: ignore[operator]


def test_constraints_pin_what_setup_installs() -> None:
    pins = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("pluggy", "typer", "rich", "pika", "paho-mqtt", "python-qpid-proton", "rstream", "pyspark",
                 "pyarrow"):
        assert name in pins, name
    lowest = (ROOT / "constraints-lowest.txt").read_text()
    for name in ("pluggy", "typer", "rich", "pika", "paho-mqtt", "python-qpid-proton", "rstream"):
        assert re.search(rf"^{re.escape(name)}==", lowest, re.M), name


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env=env, check=False)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


ROUND_TRIP = textwrap.dedent('''
    import sys
    import ackbridge, ackbridge_local
    assert "site-packages" in ackbridge.__file__ and "site-packages" in ackbridge_local.__file__, ackbridge.__file__
    with ackbridge.connect(sys.argv[1]) as conn:
        conn.declare_queue("wheels")
        outcomes = [conn.publish("wheels", f"m{i}".encode(), message_id=str(i)) for i in range(50)]
        assert all(c.result(timeout=30).confirmed for c in outcomes)
        consumer = conn.consume("wheels")
        got = []
        while len(got) < 50:
            delivery = consumer.get(timeout=10)
            assert delivery is not None, len(got)
            got.append(delivery.message_id)
            delivery.ack()
        consumer.close()
        assert sorted(got, key=int) == [str(i) for i in range(50)]
    print("round trip ok", ackbridge.__version__)
''')


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)  # builds, installs, then two Spark jobs (the demo, getting-started's)
def test_built_wheels_install_into_a_clean_venv_and_work(tmp_path: Path) -> None:
    """Build every wheel and sdist, check them, install ``ackbridge[rabbitmq,spark]``
    from them (non-editable) into a clean venv, then a round trip, docs/getting-started.md's
    broker-free programs and Spark job, and the demo."""
    dist = tmp_path / "dist"
    for path in OWN:
        run(PY, "-m", "build", "--no-isolation", "--outdir", dist,  # the wheel is built from the sdist
            ROOT / Path(path).parent, cwd=tmp_path)
    built = sorted(p.name for p in dist.iterdir())
    for name in ("ackbridge", "ackbridge_rabbitmq", "ackbridge_mqtt", "ackbridge_amqp10", "ackbridge_spark"):
        assert any(b.startswith(f"{name}-0.1.0-py3-none-any.whl") for b in built), built
        assert f"{name}-0.1.0.tar.gz" in built, built
    run(PY, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()), cwd=tmp_path)
    # The embedded broker is inside the core's wheel, found through its entry point.
    import zipfile

    with zipfile.ZipFile(next(dist.glob("ackbridge-0.1.0-*.whl"))) as wheel:
        names = wheel.namelist()
        assert "ackbridge_local/plugin.py" in names
        entry_points = wheel.read("ackbridge-0.1.0.dist-info/entry_points.txt").decode()
        assert "local = ackbridge_local.plugin" in entry_points
        assert "Requires-Dist: pluggy<2,>=1.6" in wheel.read("ackbridge-0.1.0.dist-info/METADATA").decode()

    venv = tmp_path / "clean"
    run(PY, "-m", "venv", venv, cwd=tmp_path)
    vpy = venv / "bin" / "python"
    run(vpy, "-m", "pip", "install", "-q", "--find-links", dist, "-c", ROOT / "constraints.txt",
        "ackbridge[rabbitmq,spark]", cwd=tmp_path)
    shown = run(vpy, "-m", "pip", "show", "-f", "ackbridge", cwd=tmp_path).stdout
    assert "Editable project location" not in shown
    (tmp_path / "round_trip.py").write_text(ROUND_TRIP)
    out = run(vpy, tmp_path / "round_trip.py", f"local://{tmp_path}/wheels.db", cwd=tmp_path).stdout
    assert "round trip ok 0.1.0" in out
    # docs/getting-started.md as a new user runs it: its broker-free programs and its Spark job.
    started = tmp_path / "getting-started"
    out = run(vpy, page_program("embedded", started), cwd=started).stdout
    assert out.count("ConfirmOutcome(status=confirmed)") == 4 and out.count("handled") == 4, out
    assert out.splitlines()[6] == "0", out  # the sync program's queue is empty: every order acked
    plugins = run(venv / "bin" / "ackbridge", "plugins", "--json", cwd=tmp_path).stdout
    assert '"rabbitmq"' in plugins and '"local"' in plugins and '"mqtt"' not in plugins
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env.update(COLUMNS="80", SPARK_LOCAL_IP="127.0.0.1")
    demo = run(venv / "bin" / "ackbridge", "demo", "-n", "200", "--workdir", tmp_path / "demo", cwd=tmp_path,
               env=env).stdout
    assert "lost" in demo and "confirmed" in demo, demo
    job = run(vpy, page_program("spark", started), cwd=started,
              env={**env, "PYSPARK_PYTHON": str(vpy), "PYSPARK_DRIVER_PYTHON": str(vpy)}).stdout
    assert job.splitlines()[-2:] == ["100", "0"], job  # 100 rows in the table, none left on the broker


def test_every_core_package_is_in_the_distribution() -> None:
    """A new folder under ackbridge/ left out of [tool.setuptools] packages is missing from the
    wheel (ackbridge.pipeline was, and a wheel install failed to import it)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "ackbridge").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
