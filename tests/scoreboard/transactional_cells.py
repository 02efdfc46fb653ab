"""The transactional rows' cells (issue 35): what each fault does, and the row it scores to.

* ``consumer-kills`` (inbox): every id published, the first *copies* of them twice under the
  same message id (a retransmission the broker stored twice); two consumer seats, each killed
  twice (after the handler's write before the commit; at the ack after the commit), restarted;
* ``relay-kill`` (outbox): the relay process SIGKILLed right after a confirm, before its round's
  rows are removed, then run again;
* ``cut-mid-publish`` (outbox): the relay's publishes after its 15th held unconfirmed, and its
  broker connection cut while it waits for them (``harness.break_connection``: the proxy's reset,
  the MQTT tap's cut, the fault seam's sever for the embedded broker, a management-API close for
  RabbitMQ);
* ``refused`` (outbox): one row the broker refuses (unroutable, or a body above its limit) among
  good ones.

Each outbox cell ends with a downstream inbox draining the queue. Every cell reads the effect
table (no unique constraint: a second run shows as a second row) and what the broker holds.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ackbridge
from ackbridge.testing import eventually
from ackbridge.transactional import Inbox, Outbox, Relay
from tests.scoreboard.transactional_lives import ROOT, LivesReport, competing_plans, run_lives
from tests.scoreboard.transactional_targets import GridTarget
from tests.transactional.appdb import AppDb
from tests.transactional.scenario import ids

FAULTS = ("consumer-kills", "relay-kill", "cut-mid-publish", "refused")
#: The relay's round size, and the confirm after which the relay-kill and the cut come (mid-round 3 / 2).
RELAY_BATCH, KILL_AT, CUT_AT = 10, 25, 15


@dataclass
class TxRow:
    broker: str
    db: str
    fault: str
    sharing: str = ""
    ids: int = 0
    #: Messages the broker held before anyone consumed (copies included where it stores them).
    stored: int = 0
    injected: str = ""
    effects: int = 0
    lost: int = 0
    #: Effect rows beyond one per id (a handler run twice for one id).
    duplicates: int = 0
    unexpected: int = 0
    #: Deliveries the inbox acked without running the handler (their id was held).
    skipped: int = 0
    outbox_left: str = "-"
    refused: str = "-"
    left: int | None = None
    queue_end: str = "-"
    #: A fault the broker cannot have (said in the row, never a pass).
    gap: str = ""
    error: str = ""

    @property
    def passed(self) -> bool:
        return not (self.error or self.gap or self.lost or self.duplicates or self.unexpected or self.left)

    #: 13 columns: the page lays them out in a 1280 px browser (tests/docs/test_docs_browser.py).
    HEADERS = ("broker", "db", "fault", "consumers", "ids", "stored by the broker", "faults injected",
               "effect rows", "LOST / duplicated effects / UNEXPECTED", "copies skipped by the inbox",
               "outbox left; refused table", "queue at end (broker-side)", "result")

    def cells(self) -> tuple[str, ...]:
        result = ("ok" if self.passed else f"gap: {self.gap}" if self.gap and not self.error
                  else f"FAIL {self.error}".strip())
        return (self.broker, self.db, self.fault, self.sharing, str(self.ids), str(self.stored), self.injected,
                str(self.effects), f"{self.lost} / {self.duplicates} / {self.unexpected}", str(self.skipped),
                outbox_cell(self.outbox_left, self.refused), self.queue_end, result)


def outbox_cell(left: str, refused: str) -> str:
    """``left; refused``, the broker's reason as code (a long token there may break anywhere)."""
    if left == "-":
        return "-"
    count, _, reason = refused.partition(": ")
    return f"{left}; {count}: `{reason}`" if reason else f"{left}; {count}"


def markdown(rows: list[TxRow]) -> str:
    lines = ["| " + " | ".join(TxRow.HEADERS) + " |", "|" + "---|" * len(TxRow.HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row.cells()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# ---- what every cell shares ----------------------------------------------------------------------
def publish(target: GridTarget, names: list[str], copies: int) -> None:
    """Every id once, the first *copies* twice under the same id, each copy right behind its original."""
    order = [name for i, name in enumerate(names) for _ in range(2 if i < copies else 1)]
    with ackbridge.connect(target.url(), **target.options) as conn:
        confirms = [conn.publish(target.publish_to, name.encode(), message_id=name) for name in order]
        outcomes = [confirm.result(60) for confirm in confirms]
    assert all(outcome.confirmed for outcome in outcomes), [o for o in outcomes if not o.confirmed][:3]


def drain(target: GridTarget, app_db: AppDb, names: list[str], plans: list[list[tuple[str, int]]]) -> LivesReport:
    """Consumer seats on *plans* until every id's effect is in and the broker holds nothing more."""
    seats = len(plans)
    return run_lives(target, app_db, plans,
                     lambda: len(app_db.effect_counts()) >= len(names) and target.left(seats)[0] == 0)


def score(row: TxRow, target: GridTarget, app_db: AppDb, names: list[str], report: LivesReport,
          seats: int) -> TxRow:
    counts = app_db.effect_counts()
    left, how = target.left(seats)
    return dataclasses.replace(
        row, effects=sum(counts.values()), lost=len(set(names) - set(counts)),
        duplicates=sum(n - 1 for n in counts.values() if n > 1), unexpected=len(set(counts) - set(names)),
        skipped=report.dups, left=left, queue_end=how, error="; ".join(report.errors))


def outbox_state(app_db: AppDb) -> tuple[int, int]:
    return (app_db.rows(f"SELECT count(*) FROM {app_db.outbox}")[0][0],
            app_db.rows(f"SELECT count(*) FROM {app_db.outbox}_refused")[0][0])


def write_outbox(app_db: AppDb, rows: list[tuple[str, bytes, str]]) -> None:
    """Each (destination, body, message id) a row of its own application transaction."""
    db = app_db.connect()
    try:
        outbox = Outbox(table=app_db.outbox)
        outbox.create_tables(db)
        for destination, body, message_id in rows:
            outbox.publish(db, destination, body, message_id=message_id)
            db.commit()
    finally:
        db.close()


def prepare(app_db: AppDb) -> None:
    """The effect table and the inbox table, made once before any consumer starts (competing
    processes creating one PostgreSQL table at once can collide in its catalogue)."""
    app_db.create_effects()
    db = app_db.connect()
    try:
        Inbox(db, table=app_db.inbox)
    finally:
        db.close()


# ---- the cells ---------------------------------------------------------------------------------------
def consumer_kills(target: GridTarget, app_db: AppDb, row: TxRow, n: int, copies: int) -> TxRow:
    names = ids(n, "i")
    publish(target, names, copies)
    expected = n + (copies if target.stores_copies else 0)
    stored = eventually(lambda: (s := target.stored()) >= expected and s, timeout=30, message="stored")
    plans = competing_plans()
    report = drain(target, app_db, names, plans)
    kills = dict(report.kills)
    if kills != {"before_commit": 2, "after_commit": 2}:
        report.errors.append(f"kills {kills}, not 2 before and 2 after the commit")
    # A delivery committed and never acked comes back, and the inbox acks it without the handler.
    not_skipped = set(report.killed_after_commit) - report.dup_ids
    if not_skipped:
        report.errors.append(f"committed before a kill, never skipped as a copy: {sorted(not_skipped)}")
    how = "2 seats x (1 before commit + 1 after commit) SIGKILLs, restarted"
    row = dataclasses.replace(row, ids=n, stored=stored,
                              injected=f"{sum(kills.values())} kills ({kills.get('before_commit', 0)} before commit, "
                                       f"{kills.get('after_commit', 0)} after commit; {how})")
    return score(row, target, app_db, names, report, len(plans))


def _relay_command(target: GridTarget, app_db: AppDb, kill_at: int) -> list[str]:
    url = target.harness.url(**target.options)  # relay_app takes its options in the URL
    return [sys.executable, "-m", "tests.transactional.relay_app", url, "-", app_db.kind, app_db.target,
            app_db.prefix, str(kill_at)]


def relay_kill(target: GridTarget, app_db: AppDb, row: TxRow, n: int, copies: int) -> TxRow:
    names = ids(n, "k")
    write_outbox(app_db, [(target.publish_to, name.encode(), name) for name in names])
    killed = subprocess.run(_relay_command(target, app_db, KILL_AT), cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    left_at_kill = outbox_state(app_db)[0]
    errors = []
    if killed.returncode != -9 or "killing" not in killed.stdout:
        errors.append(f"relay ended {killed.returncode}, not killed after confirm {KILL_AT}")
    again = subprocess.run(_relay_command(target, app_db, 0), cwd=ROOT, capture_output=True, text=True, timeout=300)
    if again.returncode != 0:
        errors.append(f"second relay ended {again.returncode}: {again.stderr[-200:]}")
    stored = target.stored()
    report = drain(target, app_db, names, [[]])
    report.errors[:0] = errors
    left, refused = outbox_state(app_db)
    row = dataclasses.replace(row, ids=n, stored=stored, outbox_left=str(left), refused=str(refused),
                              injected=f"relay SIGKILLed after confirm {KILL_AT} (batch {RELAY_BATCH}): "
                                       f"{left_at_kill} rows left at the kill; run again")
    if left or refused:
        report.errors.append(f"outbox ends with {left} rows, {refused} refused")
    return score(row, target, app_db, names, report, 1)


class CutMidRound:
    """A relay's connection whose publishes after the *cut_at*-th are held unconfirmed by the
    harness (``hold_confirms``: the broker's group commit, the fault proxy, the MQTT tap, or, for
    RabbitMQ, parked client-side), and cut at the relay's next wait for a confirm: the cut meets
    publishes whose confirms are outstanding, even where the broker answers fast (the embedded
    broker confirms a round before its next confirm is read)."""

    def __init__(self, harness: Any, connection: Any, cut_at: int) -> None:
        self._harness, self._connection, self.cut_at = harness, connection, cut_at
        self.published = 0
        self.in_flight_at_cut: int | None = None
        self._hold: Any = None

    def publisher(self, **options: Any) -> Any:
        return _CutPublisher(self, self._connection.publisher(**options))

    def before_publish(self) -> None:
        self.published += 1
        if self.published == self.cut_at + 1 and self.in_flight_at_cut is None:
            self._hold = self._harness.hold_confirms(self._connection)
            self._hold.__enter__()

    def before_wait(self) -> None:
        # The first wait after the hold began: the hold may keep back earlier publishes of the
        # round too (the embedded broker's group commit holds what it has not written yet), so
        # waiting for one of the held ones would only run out the relay's confirm timeout.
        if self._hold is not None:
            self.in_flight_at_cut = self.published - self.cut_at
            try:
                self._harness.break_connection(self._connection)
            finally:
                hold, self._hold = self._hold, None
                hold.__exit__(None, None, None)


class _CutPublisher:
    def __init__(self, owner: CutMidRound, publisher: Any) -> None:
        self._owner, self._publisher = owner, publisher

    def publish(self, destination: str, body: bytes, **options: Any) -> Any:
        self._owner.before_publish()
        return _CutConfirm(self._owner, self._publisher.publish(destination, body, **options))


class _CutConfirm:
    def __init__(self, owner: CutMidRound, confirm: Any) -> None:
        self._owner, self._confirm = owner, confirm

    def result(self, timeout: float | None = None) -> Any:
        self._owner.before_wait()
        return self._confirm.result(timeout)


def cut_mid_publish(target: GridTarget, app_db: AppDb, row: TxRow, n: int, copies: int) -> TxRow:
    names = ids(n, "c")
    write_outbox(app_db, [(target.publish_to, name.encode(), name) for name in names])
    db = app_db.connect()
    try:
        with ackbridge.connect(target.url(), **target.options) as conn:
            cut = CutMidRound(target.harness, conn, CUT_AT)
            totals = Relay(db, cut, table=app_db.outbox, batch=RELAY_BATCH, confirm_timeout=10).run(idle_exit=0.5)
    finally:
        db.close()
    stored = target.stored()
    report = drain(target, app_db, names, [[]])
    if not cut.in_flight_at_cut:
        report.errors.append(f"the cut met no publish in flight ({cut.published} published)")
    left, refused = outbox_state(app_db)
    if left or refused:
        report.errors.append(f"outbox ends with {left} rows, {refused} refused")
    row = dataclasses.replace(row, ids=n, stored=stored, outbox_left=str(left), refused=str(refused),
                              injected=f"connection cut while the round waited for its confirms, the last "
                                       f"{cut.in_flight_at_cut} publishes (after the {CUT_AT}th) held unconfirmed; "
                                       f"{totals.unknown} unknown outcomes over the rounds, sent again")
    return score(row, target, app_db, names, report, 1)


def refused(target: GridTarget, app_db: AppDb, row: TxRow, n: int, copies: int) -> TxRow:
    refusal = target.refusal()
    if refusal is None:
        return dataclasses.replace(row, gap=REFUSES_NOTHING.get(target.broker, "the harness names no refusal"))
    names = ids(n, "r")
    destination, body = refusal
    write_outbox(app_db, [(destination, body, "bad-1"), *((target.publish_to, name.encode(), name) for name in names)])
    db = app_db.connect()
    try:
        with ackbridge.connect(target.url(), **target.options) as conn:
            totals = Relay(db, conn, table=app_db.outbox, batch=RELAY_BATCH).run(idle_exit=0.5)
    finally:
        db.close()
    stored = target.stored()
    report = drain(target, app_db, names, [[]])
    found = app_db.rows(f"SELECT message_id, destination, reason FROM {app_db.outbox}_refused")
    left, _ = outbox_state(app_db)
    if [(m, d) for m, d, _ in found] != [("bad-1", destination)] or not found[0][2]:
        report.errors.append(f"refused table holds {found!r:.200}")
    elif totals.refusals != [("bad-1", found[0][2])]:
        report.errors.append(f"relay told {totals.refusals!r:.200}, the table {found[0][2]!r:.100}")
    if left:
        report.errors.append(f"outbox ends with {left} rows")
    reason = found[0][2] if found else "-"
    what = "oversized body" if destination == target.publish_to else "unroutable destination"
    row = dataclasses.replace(row, ids=n, stored=stored, outbox_left=str(left), refused=f"{len(found)}: {reason[:80]}",
                              injected=f"1 refused row ({what})")
    return score(row, target, app_db, names, report, 1)


#: Brokers that refuse no publish the grid can make (stated in the row).
REFUSES_NOTHING = {
    "amqp10-rabbitmq": "RabbitMQ 3.10's AMQP 1.0 plugin accepts unroutable publishes and sets no size limit "
                       "the harness can reach: nothing is refused",
}

CELLS: dict[str, Callable[[GridTarget, AppDb, TxRow, int, int], TxRow]] = {
    "consumer-kills": consumer_kills, "relay-kill": relay_kill, "cut-mid-publish": cut_mid_publish,
    "refused": refused,
}
