"""Every ```python block in README.md and docs/**/*.md runs (or, when marked a
fragment, at least compiles), so an example that drifts from the API fails here.

How a block is run -- the rules a docs writer needs:

* **Which broker.** An HTML comment on the line(s) right before the block says
  what it needs: ``<!-- needs: rabbitmq -->`` (127.0.0.1:5672 guest/guest),
  ``<!-- needs: mqtt -->`` (127.0.0.1:1883), ``<!-- needs: nats -->``
  (127.0.0.1:4222), ``<!-- needs: amqp10 -->`` (RabbitMQ's AMQP 1.0 plugin on
  5672), ``<!-- needs: rabbitmq_streams -->`` (RabbitMQ's stream plugin on 5552),
  ``<!-- needs: spark -->`` (a local SparkSession over the embedded
  broker). Without a comment, a block naming one of those brokers' URLs
  (``amqp://``, ``mqtt://``, ``nats://``, ``amqp10://``, ``rabbitmq-stream://``) needs that broker;
  any other block runs on the embedded broker. The test carries the matching
  pytest marker, so a missing broker fails in CI and skips locally, as for
  every other broker test.
* **Fragments.** ``<!-- fragment -->`` marks a block that is deliberately not
  runnable on its own (an excerpt continuing the block before it). It is only
  compiled (after ``textwrap.dedent``), so a syntax error still fails. Keep
  them few.
* **One page, one program.** The blocks of a page that need the same thing run
  in page order in one namespace, as a reader would type them.
* **What the test provides** (names a block may use without defining them):
  ``url`` (the broker's URL), ``conn`` (an open connection to it), ``queue``
  (a queue name of its own; it and ``"orders"`` are declared beforehand on the
  embedded broker only, since broker examples declare their own queues with
  their own arguments),
  ``body`` (bytes), ``spark`` (for ``needs: spark``) and ``handle(body)``, the
  reader's own code: it records the body, and once a second has passed with
  no new call it closes the consumers the block holds, so a
  ``for delivery in consumer:`` loop (which waits for ever by design) ends
  as it would on shutdown.
* **Rewrites** (so runs never collide and leave nothing behind): the queue
  names ``"orders"`` and ``"out"`` in string literals (also as
  ``"/queue/orders"``) become unique names, deleted on the broker afterwards;
  ``local://`` URLs and ``/tmp/`` paths move into pytest's tmp dir. Broker
  URLs stay as written: the docs use the addresses the test brokers listen on.
* **Printed outcomes.** A comment quoting a ``ConfirmOutcome(...)`` repr must
  match what the block really printed.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import textwrap
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from tests.conftest import IN_CI, require_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

BROKERS = {  # needs -> (URL, port)
    "rabbitmq": ("amqp://guest:guest@127.0.0.1:5672/", 5672),
    "mqtt": ("mqtt://127.0.0.1:1883", 1883),
    "nats": ("nats://127.0.0.1:4222", 4222),
    "amqp10": ("amqp10://guest:guest@127.0.0.1:5672", 5672),
    "rabbitmq_streams": ("rabbitmq-stream://guest:guest@127.0.0.1:5552/", 5552),
}
SCHEMES = {"amqp10://": "amqp10", "amqp://": "rabbitmq", "mqtt://": "mqtt", "nats://": "nats",
           "rabbitmq-stream://": "rabbitmq_streams"}
PLACEHOLDERS = ("orders", "out")
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(fragment|needs:\s*([a-z0-9_]+))\s*-->")
REPR = re.compile(r"#\s*(ConfirmOutcome\([^)]*\))")


@dataclass
class Block:
    page: str
    line: int
    source: str
    needs: str  # "embedded", a BROKERS key, "spark" or "fragment"

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text()
    page = str(path.relative_to(ROOT))
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip().rsplit("\n", 1)[-1]
        mark = MARK.fullmatch(before.strip())
        source = match.group(1)
        inferred = next((needs for scheme, needs in SCHEMES.items() if scheme in source), None)
        if mark is None:
            needs = inferred or "embedded"
        else:
            needs = "fragment" if mark.group(1) == "fragment" else mark.group(2)
            if needs not in (*BROKERS, "spark", "fragment", "embedded"):
                raise ValueError(f"{page}:{line}: unknown marker {before.strip()!r}")
            if inferred and needs in BROKERS and needs != inferred:
                raise ValueError(f"{page}:{line}: marked {needs} but its URL is {inferred}'s")
        found.append(Block(page, line, source, needs))
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def groups() -> Iterator[Any]:
    seen: dict[tuple[str, str], list[Block]] = {}
    for block in ALL_BLOCKS:
        if block.needs != "fragment":
            seen.setdefault((block.page, block.needs), []).append(block)
    for (page, needs), members in seen.items():
        marks = [getattr(pytest.mark, needs)] if needs != "embedded" else []
        if needs == "spark":
            marks.append(pytest.mark.timeout(300))
        yield pytest.param(members, id=f"{page}[{needs}]", marks=marks)


@dataclass
class Reader:
    """``handle(body)`` in the examples; see the module docstring."""

    namespace: dict[str, Any]
    bodies: list[bytes] = field(default_factory=list)
    quiet_s: float = 1.0
    _timer: threading.Timer | None = None

    def __call__(self, body: bytes) -> None:
        self.bodies.append(body)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(self.quiet_s, self._close_consumers)
        self._timer.daemon = True
        self._timer.start()

    def _close_consumers(self) -> None:
        for value in list(self.namespace.values()):
            if isinstance(value, ackbridge.Consumer):
                value.close()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def rewrite(source: str, names: dict[str, str], tmp: Path) -> str:
    for placeholder in PLACEHOLDERS:
        name = names.get(placeholder, placeholder)
        source = re.sub(rf"""(["'/]){placeholder}(["'])""", rf"\g<1>{name}\g<2>", source)
    source = re.sub(r"local:///?[^\s\"']+", f"local://{tmp}/broker.db", source)
    return re.sub(r"(?<![\w:/])/tmp/", f"{tmp}/files/", source)


def run_block(block: Block, source: str, namespace: dict[str, Any]) -> None:
    out = io.StringIO()
    code = compile(source, block.where, "exec")
    with contextlib.redirect_stdout(out):
        exec(code, namespace)  # the docs' own examples
    printed = out.getvalue()
    for expected in REPR.findall(block.source):
        assert expected in printed, f"{block.where}: the comment says {expected}, the block printed {printed!r}"


def cleanup(needs: str, url: str, names: dict[str, str]) -> None:
    """Delete the queues the examples declared (and their dead-letter companions)."""
    if needs == "amqp10":  # AMQP 1.0 has no delete; the queues live on the same RabbitMQ
        try:
            conn = ackbridge.connect(BROKERS["rabbitmq"][0])
        except ackbridge.AckbridgeError:
            return
    else:
        conn = ackbridge.connect(url)
    with conn:
        for name in names.values():
            with contextlib.suppress(ackbridge.AckbridgeError):
                conn.delete_queue(name)


@pytest.mark.parametrize("members", list(groups()))
def test_docs_page_blocks_run(members: list[Block], tmp_path: Path) -> None:
    needs = members[0].needs
    suffix = uuid.uuid4().hex[:8]
    names = {p: f"{p}-docs-{suffix}" for p in (*PLACEHOLDERS, "queue")}  # "queue": the test's own name
    (tmp_path / "files").mkdir()
    if needs in BROKERS:
        url, port = BROKERS[needs]
        require_port(port, needs)
    else:
        url = f"local://{tmp_path}/broker.db"
    namespace: dict[str, Any] = {"__name__": "__docs__", "url": url, "queue": names["queue"],
                                 "body": b'{"id": 1}'}
    reader = Reader(namespace)
    namespace["handle"] = reader
    spark = None
    if needs == "spark":
        from tests.spark.helpers import HAVE_JAVA, make_spark

        if not HAVE_JAVA:
            if IN_CI:
                pytest.fail("Java is needed for the Spark docs blocks")
            pytest.skip("Java is needed for the Spark docs blocks")
        spark = namespace["spark"] = make_spark("ackbridge-docs")
    conn = namespace["conn"] = ackbridge.connect(url)
    try:
        if needs in ("embedded", "spark"):
            conn.declare_queue(names["orders"])
            conn.declare_queue(names["queue"])
        for block in members:
            run_block(block, rewrite(block.source, names, tmp_path), namespace)
        if any("handle(" in block.source for block in members):
            assert reader.bodies, "the example's consumer never handed a message to handle()"
    finally:
        reader.cancel()
        if spark is not None:
            for query in spark.streams.active:
                query.stop()
            spark.stop()
        conn.close()
        if needs in BROKERS:
            cleanup(needs, url, names)
        shutil.rmtree(tmp_path / "files", ignore_errors=True)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.needs == "fragment"], ids=lambda b: b.where)
def test_docs_fragment_compiles(block: Block) -> None:
    compile(textwrap.dedent(block.source), block.where, "exec")


def test_fragments_are_few() -> None:
    """Fragments are the exception: most blocks must run."""
    fragments = [b.where for b in ALL_BLOCKS if b.needs == "fragment"]
    assert len(fragments) <= 3, fragments


def test_rules_find_the_blocks() -> None:
    assert len(ALL_BLOCKS) >= 15
    assert any(b.needs == "spark" for b in ALL_BLOCKS)
    assert rewrite('conn.publish("orders", b"x"); connect("local:///tmp/ackbridge.db")',
                   {"orders": "orders-docs-1"}, Path("/t")) == \
        'conn.publish("orders-docs-1", b"x"); connect("local:///t/broker.db")'
