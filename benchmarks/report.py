"""Run every benchmark once, one after the other, and gather them in docs/benchmarks.md.

Each benchmark measures ackbridge against the raw client doing the same work
in the same run, and prints its own ratios; this script adds the machine
description and a plot of the ratios (docs/benchmarks.png).

    .venv/bin/python benchmarks/report.py            # all of them (about 15 minutes)
    .venv/bin/python benchmarks/report.py --quick    # smaller N
    .venv/bin/python benchmarks/report.py --only spark_scaling.py   # re-run one section, keep the others
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

BENCHES = [
    ("core (embedded broker)", "core_bench.py", ["--n", "20000"], ["--n", "5000"]),
    ("RabbitMQ (issue 3)", "rabbitmq_bench.py", ["--n", "100000"], ["--n", "20000"]),
    ("MQTT (issue 5)", "mqtt_bench.py", ["--n", "20000"], ["--n", "5000"]),
    ("AMQP 1.0 (issue 6)", "amqp10_bench.py", ["--count", "20000"], ["--count", "5000"]),
    ("Spark connector (issue 4)", "spark_bench.py", ["--messages", "100000,300000", "--batch", "25000"],
     ["--messages", "20000", "--batch", "5000"]),
    ("Spark source scaling (issue 7)", "spark_scaling.py", ["--png", str(DOCS / "spark_scaling.png")],
     ["--quick", "--png", str(DOCS / "spark_scaling.png")]),
]
#: Benchmarks that print Markdown (tables, an image link) rather than plain text.
MARKDOWN_OUTPUT = {"spark_scaling.py"}

_FLOAT = re.compile(r"(?<![\d,.])(\d\.\d\d)(?![\d,])")


def ratios(title: str, out: str) -> list[tuple[str, float]]:
    """Pull 'ratio' figures out of a benchmark's own printout (formats differ per script)."""
    found: list[tuple[str, float]] = []
    previous = ""
    lines = out.splitlines()
    header_has_ratio = any("ratio" in line.lower() and not _FLOAT.search(line) for line in lines)
    for line in lines:
        if line.lower().startswith(("machine", "messages=", "raw drain:")) or "target" in line.lower():
            continue  # descriptions and verdicts, not measurements
        floats = [float(f) for f in _FLOAT.findall(line)]
        is_ratio_line = "ratio" in line.lower() or (header_has_ratio and floats)
        if is_ratio_line and floats and floats[-1] <= 5:
            label = line.split("ratio")[0].strip() or previous
            label = re.split(r"\s{2,}|\d", label)[0].strip() or previous
            found.append((f"{title.split(' (')[0]}: {label[:40]}", floats[-1]))
        elif line.strip():
            previous = re.split(r"\s{2,}|\(", line.strip())[0][:40]
    return found


def plot(points: list[tuple[str, float]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(points) + 1.2))
    labels = [p[0] for p in points][::-1]
    values = [p[1] for p in points][::-1]
    ax.barh(labels, values, color=["#3a7" if v >= 0.9 else "#d84" for v in values])
    ax.axvline(0.9, color="black", linestyle="--", linewidth=1, label="target 0.9")
    ax.set_xlabel("ackbridge / raw client, same work, same run")
    ax.legend(loc="lower right")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(DOCS / "benchmarks.png", dpi=110)


def machine() -> str:
    mem = ""
    try:
        kb = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    cpu = ""
    try:
        cpu = next(line for line in open("/proc/cpuinfo") if line.startswith("model name")).split(":", 1)[1].strip()
    except (OSError, StopIteration):
        pass
    return f"{platform.machine()} {cpu}, {os.cpu_count()} cores{mem}, Linux {platform.release()}, " \
           f"Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from docs/benchmarks.md")
    args = parser.parse_args()
    if args.replot:
        text = (DOCS / "benchmarks.md").read_text()
        points = []
        for part in text.split("\n## ")[1:]:
            title = part.splitlines()[0]
            if "```" in part:
                points += ratios(title, part.split("```")[1])
        plot(points)
        return 0
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT))
    sections = []
    for title, script, full, quick in BENCHES:
        if args.only and script not in args.only:
            continue
        cmd = [sys.executable, str(ROOT / "benchmarks" / script), *(quick if args.quick else full)]
        print(f"== {title}: {' '.join(cmd[1:])}", flush=True)
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, check=False)
        out = run.stdout.strip() + (f"\n[exit {run.returncode}] {run.stderr.strip()[-2000:]}" if run.returncode else "")
        print(out, flush=True)
        sections.append((title, " ".join(Path(c).name if c.startswith("/") else c for c in cmd[1:]), out,
                         script in MARKDOWN_OUTPUT))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = [f"# Benchmarks\n\nOne run of `benchmarks/report.py{' --quick' if args.quick else ''}` on {when}.\n",
            f"Machine: {machine()}. Brokers on loopback: RabbitMQ 3.10.8, Mosquitto 2.0.11.\n",
            "Every figure is a ratio against the raw client doing the same work in the same run; "
            "other work on the machine moves absolute numbers a lot, ratios less.\n"]
    ran = {title: (f"## {title}\n\n`{cmd}`\n\n{out}\n" if markdown else f"## {title}\n\n`{cmd}`\n\n```\n{out}\n```\n")
           for title, cmd, out, markdown in sections}
    if args.only and (DOCS / "benchmarks.md").exists():
        # Re-run sections only: keep every other section of the existing report as it is.
        kept = (DOCS / "benchmarks.md").read_text().split("\n## ")
        text = [kept[0].rstrip() + "\n"]
        for part in kept[1:]:
            title = part.splitlines()[0]
            if title == "Ratios":
                continue
            text.append(ran.pop(title, "## " + part.rstrip() + "\n"))
        text += list(ran.values())
        points = []
        for part in "\n".join(text).split("\n## ")[1:]:
            if "```" in part:
                points += ratios(part.splitlines()[0], part.split("```")[1])
    else:
        text += list(ran.values())
        points = [pt for title, _, out, markdown in sections if not markdown for pt in ratios(title, out)]
    if points:
        text.append("## Ratios\n\n![ratios](benchmarks.png)\n")
        plot(points)
    (DOCS / "benchmarks.md").write_text("\n".join(text))
    print(f"wrote {DOCS / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
