"""What a reader of the built site sees, checked in the HTML mkdocs writes (the
layout in a real browser at 1280 px is tests/docs/test_docs_browser.py's; this
is the fast static half):

* every table of every page sits in the content column (``div[role=main]``)
  and the site's stylesheet, linked from that page, makes such tables a block
  that scrolls sideways (``display: block; overflow-x: auto; max-width: 100%``),
  so a wide table scrolls inside its column instead of being cut off;
* every fenced block written with a language (```` ```python ````, ```` ```bash ````)
  is coloured at build time: Pygments token spans in the HTML, the Pygments
  rules in the stylesheet, and no highlight.js fetched from a CDN.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CSS = "css/extra.css"
LANGUAGE_FENCE = re.compile(r"^```(python|bash)[ \t]*$", re.M)
TABLE_RULE = re.compile(r"^\|\s*:?-{3,}", re.M)  # the |---| line under a Markdown table's header
TOKEN = re.compile(r'<span class="(k|kn|kc|n|nb|nn|s|s1|s2|mi|o|p|c1|w|nv|nt)">')


class Page(HTMLParser):
    """Tables and where they sit; highlighted code blocks; stylesheets linked."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.tables_outside_main = 0
        self.tables_in_main = 0
        self.tables = 0
        self.stylesheets: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "link" and attributes.get("rel") == "stylesheet":
            self.stylesheets.append(attributes.get("href") or "")
        if tag == "script" and attributes.get("src"):
            self.scripts.append(attributes["src"] or "")
        if tag == "table":
            self.tables += 1
            in_main = any(t == "div" and a.get("role") == "main" for t, a in self.stack)
            in_theme_dialog = any("modal" in (a.get("class") or "").split() for _, a in self.stack)
            if in_main:
                self.tables_in_main += 1
            elif not in_theme_dialog:  # the theme's keyboard-shortcut dialog holds a small table of its own
                self.tables_outside_main += 1
        if tag not in ("link", "meta", "img", "br", "hr", "input"):
            self.stack.append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return


def highlighted_blocks(html: str) -> int:
    """Code blocks holding at least one Pygments token span."""
    return sum(1 for block in re.findall(r'<div class="highlight"><pre>(.*?)</pre></div>', html, re.S)
               if TOKEN.search(block))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def pages() -> list[Path]:
    return sorted(p.relative_to(DOCS) for p in DOCS.rglob("*.md"))


def built(site: Path, page: Path) -> str:
    return (site / page.with_suffix("") / "index.html").read_text()


def test_the_stylesheet_makes_tables_scroll_and_colours_code(site: Path) -> None:
    css = re.sub(r"/\*.*?\*/", "", (site / CSS).read_text(), flags=re.S)
    rule = re.search(r'div\[role="main"\] table\s*\{([^}]*)\}', css)
    assert rule is not None, "no rule for the content column's tables"
    declarations = {k.strip(): v.strip() for k, v in (d.split(":", 1) for d in rule.group(1).split(";") if ":" in d)}
    assert declarations.get("display") == "block" and declarations.get("overflow-x") == "auto", declarations
    assert declarations.get("max-width") == "100%", declarations
    for token in ("k", "kn", "s1", "c1", "nb"):
        assert re.search(rf"\.highlight \.{token} \{{[^}}]*color", css), token


@pytest.mark.parametrize("page", pages(), ids=str)
def test_page_tables_scroll_in_their_column_and_code_is_coloured(site: Path, page: Path) -> None:
    html = built(site, page)
    parsed = Page()
    parsed.feed(html)
    assert any(href.endswith(CSS) for href in parsed.stylesheets), parsed.stylesheets
    text = (DOCS / page).read_text()
    assert parsed.tables_outside_main == 0, f"{parsed.tables_outside_main} of {parsed.tables} tables outside the column"
    outside_code = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    assert parsed.tables_in_main >= len(TABLE_RULE.findall(outside_code)), (parsed.tables_in_main, page)
    assert not [s for s in parsed.scripts if "highlight" in s], parsed.scripts  # no highlight.js from a CDN
    fences = len(LANGUAGE_FENCE.findall(text))
    assert highlighted_blocks(html) >= fences, f"{fences} python/bash blocks, {highlighted_blocks(html)} coloured"


def test_the_checks_see_tables_and_code(site: Path) -> None:
    """The parser finds what it checks: wide tables on the Spark page, coloured code on getting started."""
    spark = Page()
    spark.feed(built(site, Path("spark.md")))
    assert spark.tables >= 5
    assert highlighted_blocks(built(site, Path("getting-started.md"))) >= 8
