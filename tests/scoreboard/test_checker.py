"""The checker's arithmetic, on hand-made histories."""

from pathlib import Path

from ackbridge.messages import ConfirmStatus
from tests.scoreboard.checker import History, failed_row, markdown, replace_section, score


def test_counts_lost_unexpected_duplicates_and_recovered() -> None:
    h = History(attempted={"a", "b", "c", "d"})
    h.outcome("a", ConfirmStatus.CONFIRMED)
    h.outcome("b", ConfirmStatus.CONFIRMED)
    h.outcome("c", ConfirmStatus.UNKNOWN)
    h.outcome("d", ConfirmStatus.REFUSED)
    h.delivered.update(["a", "a", "c", "zz"])
    row = score("embedded", "consumer", "none", h)
    assert (row.lost, row.unexpected, row.duplicated, row.recovered) == (1, 1, 1, 1)  # b lost, zz unexpected
    assert not row.passed


def test_expected_dead_letters_are_not_lost() -> None:
    h = History(attempted={"p"}, confirmed={"p"}, dead_lettered={"p"}, expected_dead={"p"})
    row = score("embedded", "consumer", "poison", h)
    assert row.lost == 0 and row.passed and row.dead_lettered == "1/1"


def test_a_cell_that_cannot_run_fails() -> None:
    row = failed_row("mqtt-5", "spark-sink", "reset", "plugin missing")
    assert not row.passed
    assert "FAIL plugin missing" in markdown([row])


def test_replace_section_keeps_the_other_sections(tmp_path: Path) -> None:
    page = tmp_path / "scoreboard.md"
    page.write_text("# Reliability scoreboard\n\n## A\nold a\n\n## B\nb\n")
    replace_section(page, "## A", "## A (new)\nnew a\n")
    replace_section(page, "## C", "## C\nc\n")
    assert page.read_text() == "# Reliability scoreboard\n## A (new)\nnew a\n\n## B\nb\n## C\nc\n"
