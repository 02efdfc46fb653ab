"""The getting-started page's programs, as a new user runs them: the blocks that
need no server (``local://``) and its Spark job, written out as scripts for a
clean virtualenv's python (tests/packaging/test_distributions.py)."""

from __future__ import annotations

from pathlib import Path

from tests.docs.test_docs_code_blocks import ROOT, blocks_of, rewrite

PAGE = ROOT / "docs" / "getting-started.md"


def page_program(needs: str, workdir: Path) -> Path:
    """The page's blocks that need *needs*, in page order, as one script in
    *workdir*; ``local://`` and ``/tmp/`` paths moved into *workdir*, as the
    docs test does. The script uses nothing the docs test provides."""
    blocks = [block for block in blocks_of(PAGE) if block.needs == needs]
    assert blocks, f"{PAGE.name} has no {needs} block"
    (workdir / "files").mkdir(parents=True, exist_ok=True)
    script = workdir / f"getting_started_{needs}.py"
    script.write_text("\n\n".join(rewrite(block.source, {}, workdir) for block in blocks))
    return script
