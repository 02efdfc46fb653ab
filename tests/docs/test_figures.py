"""The figures are shown where they are discussed, and the scoreboard generator keeps its figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scoreboard import run

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(("page", "figure"), [
    ("scoreboard.md", "scoreboard.png"),
    ("benchmarks.md", "benchmarks.png"),
    ("benchmarks.md", "spark_scaling.png"),
    ("spark.md", "spark_scaling.png"),
])
def test_figure_shown_on_its_page(page: str, figure: str) -> None:
    assert (DOCS / figure).exists()
    assert f"]({figure})" in (DOCS / page).read_text()


def test_spark_guide_keeps_no_benchmark_diary() -> None:
    text = (DOCS / "spark.md").read_text()
    assert "Where it stands" not in text and "benchmarks.md" in text
    assert "What the benchmark measures" in (DOCS / "benchmarks.md").read_text()


def test_scoreboard_generator_keeps_the_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "DOCS", tmp_path)
    monkeypatch.setattr(run, "plot", lambda cells, n: None)
    run.write_report([], 2000)
    text = (tmp_path / "scoreboard.md").read_text()
    assert run.FIGURE in text
    assert run.FIGURE in (DOCS / "scoreboard.md").read_text()
