"""Every docs page as a reader sees it: headless Chromium, 1280 px wide, no table wider
than its column (issue 37).

tests/docs/test_docs_rendering.py reads the HTML mkdocs writes; this file lays the pages out
in a real browser and measures them. For each table of the content column (``div[role=main]``):

* its box starts and ends inside its container's content box;
* every cell does too: a cell past the edge is cut off or hidden behind a sideways scroll
  (the stylesheet makes tables scroll as a last resort, so the box alone would always fit);
* it has nothing to scroll to (``scrollWidth`` within ``clientWidth``).

And no page scrolls sideways. The widest grid's page is kept as a screenshot in
build/screenshots/ (gitignored) for a reader to look at.

Chromium is Debian's (scripts/browser.sh installs it), driven by Playwright: Playwright's own
browser download cannot reach its host from CI. Without Chromium or Playwright the tests fail
under CI=true and skip elsewhere.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

import pytest

from tests.conftest import IN_CI
from tests.docs.test_docs_rendering import DOCS, ROOT, TABLE_RULE, pages

if TYPE_CHECKING:
    from playwright.sync_api import Page, ViewportSize

pytestmark = pytest.mark.browser

WIDTH = 1280
VIEWPORT: ViewportSize = {"width": WIDTH, "height": 900}
# Playwright adds --headless, --no-sandbox (root needs it) and a fresh --user-data-dir. The rest keep
# Chromium off the network: its background fetches fail on a closed network and delay every launch.
CHROMIUM_FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
SCREENSHOTS = ROOT / "build" / "screenshots"
SLACK = 1.0  # px: layout widths are fractional, and a border may round either way

# Reads the layout of the page in the browser. A table's column is its parent's content box:
# the content column itself, or a narrower block inside it (the API page nests its tables).
MEASURE = """() => {
  const main = document.querySelector('div[role="main"]');
  const tables = main === null ? [] : [...main.querySelectorAll('table')];
  return {
    innerWidth: window.innerWidth,
    pageWidth: document.documentElement.scrollWidth,
    hasMain: main !== null,
    tables: tables.map((table) => {
      const parent = table.parentElement;
      const style = getComputedStyle(parent);
      const columnLeft = parent.getBoundingClientRect().left + parent.clientLeft + parseFloat(style.paddingLeft);
      const columnRight = columnLeft + parent.clientWidth
                          - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      const box = table.getBoundingClientRect();
      const cells = [...table.querySelectorAll('th, td')].map((cell) => cell.getBoundingClientRect());
      return {
        heading: table.rows.length ? table.rows[0].innerText.replace(/\\s+/g, ' ').slice(0, 80) : '',
        columns: table.rows.length ? table.rows[0].cells.length : 0,
        columnLeft, columnRight,
        boxLeft: box.left, boxRight: box.right,
        cellsLeft: Math.min(box.left, ...cells.map((c) => c.left)),
        cellsRight: Math.max(box.right, ...cells.map((c) => c.right)),
        scrollWidth: table.scrollWidth, clientWidth: table.clientWidth,
      };
    }),
  };
}"""


class TableLayout(TypedDict):
    heading: str
    columns: int
    columnLeft: float
    columnRight: float
    boxLeft: float
    boxRight: float
    cellsLeft: float
    cellsRight: float
    scrollWidth: int
    clientWidth: int


class PageLayout(TypedDict):
    innerWidth: int
    pageWidth: int
    hasMain: bool
    tables: list[TableLayout]


def missing(what: str) -> NoReturn:
    """Fail under CI=true (the check must run there), skip elsewhere."""
    if IN_CI:
        pytest.fail(f"{what} -- CI needs it: run scripts/browser.sh and scripts/setup.sh")
    pytest.skip(f"{what} (scripts/browser.sh installs it; set CI=true to make this a failure)")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per file fetched would bury the test report."""


class SiteServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The browser drops what it was still fetching (the search index) when it moves to the
        # next page; any other error is printed as usual.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built as test_docs_rendering builds it, served on loopback."""
    site = tmp_path_factory.mktemp("browser-site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    server = SiteServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    """One headless Chromium tab, 1280 px wide, for every page of the module."""
    chromium = shutil.which("chromium")
    if chromium is None:
        missing("Chromium is not installed (no chromium on PATH)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # not installed, or installed without what it needs
        missing(f"Playwright cannot be imported ({exc}; it is in the test extra of pyproject.toml)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            yield browser.new_page(viewport=VIEWPORT)
        finally:
            browser.close()


def url_of(base_url: str, doc: Path) -> str:
    return base_url + doc.with_suffix("").as_posix() + "/"


def render(page: Page, base_url: str, doc: Path) -> PageLayout:
    """Open the page and measure it once its web fonts are in (they change every width)."""
    response = page.goto(url_of(base_url, doc))
    assert response is not None and response.ok, (doc, response and response.status)
    page.evaluate("document.fonts.ready.then(() => document.fonts.status)")
    layout: PageLayout = page.evaluate(MEASURE)
    return layout


def screenshot(page: Page, doc: Path) -> tuple[Path, bytes]:
    """The whole page as rendered, kept in build/screenshots/ for a reader to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{doc.with_suffix('').as_posix().replace('/', '-')}-{WIDTH}.png"
    return path, page.screenshot(path=path, full_page=True)


def overflows(table: TableLayout) -> list[str]:
    """What about a table sits past the edge of its column, in words."""
    found = []
    if table["boxLeft"] < table["columnLeft"] - SLACK or table["boxRight"] > table["columnRight"] + SLACK:
        found.append(f"box {table['boxLeft']:.0f}..{table['boxRight']:.0f} px")
    if table["cellsLeft"] < table["columnLeft"] - SLACK or table["cellsRight"] > table["columnRight"] + SLACK:
        found.append(f"cells {table['cellsLeft']:.0f}..{table['cellsRight']:.0f} px")
    if table["scrollWidth"] > table["clientWidth"] + SLACK:
        found.append(f"scrolls: {table['scrollWidth']} px of content in {table['clientWidth']} px")
    if not found:
        return []
    column = f"column {table['columnLeft']:.0f}..{table['columnRight']:.0f} px"
    return [f"{table['columns']}-column table '{table['heading']}': {', '.join(found)}, {column}"]


def markdown_tables(doc: Path) -> list[str]:
    """The |---| rule line of each Markdown table of the page, fenced code left out."""
    outside_code = re.sub(r"^```.*?^```", "", (DOCS / doc).read_text(), flags=re.M | re.S)
    return [outside_code[m.start():].split("\n", 1)[0] for m in TABLE_RULE.finditer(outside_code)]


@pytest.mark.parametrize("doc", pages(), ids=str)
def test_no_table_is_wider_than_its_column_at_1280_px(page: Page, base_url: str, doc: Path) -> None:
    layout = render(page, base_url, doc)
    assert layout["innerWidth"] == WIDTH and layout["hasMain"], layout
    # The measure sees every table the page was written with (the API page has generated ones too).
    assert len(layout["tables"]) >= len(markdown_tables(doc)), (len(layout["tables"]), len(markdown_tables(doc)))
    wide = [line for table in layout["tables"] for line in overflows(table)]
    page_scrolls = layout["pageWidth"] > layout["innerWidth"]
    if wide or page_scrolls:
        shot, _ = screenshot(page, doc)
        problems = [*wide, f"the page is {layout['pageWidth']} px wide"] if page_scrolls else wide
        pytest.fail(f"{doc} at {WIDTH} px (screenshot {shot}):\n  " + "\n  ".join(problems))


def widest_grid() -> Path:
    """The page with the Markdown table of the most columns (the scoreboard's publisher rows)."""
    def columns(doc: Path) -> int:
        return max((rule.strip().count("|") - 1 for rule in markdown_tables(doc)), default=0)
    return max(pages(), key=columns)


def test_the_widest_grid_renders_within_1280_px(page: Page, base_url: str) -> None:
    """A full-page screenshot is as wide as the page's content: 1280 px when nothing sticks out."""
    doc = widest_grid()
    layout = render(page, base_url, doc)
    assert max(table["columns"] for table in layout["tables"]) >= 20, doc  # the measure found the grid
    shot, png = screenshot(page, doc)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(png[16:20], "big")  # IHDR: the width is the first field of the first chunk
    assert width == WIDTH, f"{doc} renders {width} px wide at a {WIDTH} px viewport (screenshot {shot})"
