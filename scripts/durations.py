"""Write tests/durations.json from a full run's JUnit XML: seconds per test node id.

    .venv/bin/pytest ... --junitxml=run.xml && python scripts/durations.py run.xml

tests/scheduling.py starts the longest units of work first from these figures;
re-measure when the suite's slow tests change (an unmeasured test counts 1 s).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def node_id(classname: str, name: str) -> str:
    """``tests.spark.test_x.TestY`` + ``test_z[p]`` -> ``tests/spark/test_x.py::TestY::test_z[p]``."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name.split("@", 1)[0]])
    raise ValueError(f"no test file for {classname!r}")


def main(junit: str) -> None:
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        key = node_id(case.get("classname", ""), case.get("name", ""))
        seconds[key] = round(seconds.get(key, 0.0) + float(case.get("time", "0")), 1)
    out = ROOT / "tests" / "durations.json"
    out.write_text(json.dumps(dict(sorted(seconds.items())), indent=0) + "\n")
    print(f"{len(seconds)} tests, {sum(seconds.values()) / 60:.1f} min in all -> {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1])
