"""The consumer processes of a transactional row: seats, each a series of lives.

A seat is one consumer's place: its lives run one after another, each a process of
:mod:`tests.scoreboard.transactional_consumer`. Every life but the last SIGKILLs itself at its
point (and must die of SIGKILL: a life that ends otherwise is an error of the row); the last runs
until the row's condition holds (every id's effect in the table, nothing left on the broker),
then is stopped with SIGTERM and must exit 0. Seats run at once (``compete``, ``readers``; the last
lives start once every killing life is over) or take turns, one life at a time, interleaved, with
one last life (``turns``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ackbridge.testing import eventually
from ackbridge.urls import redact
from tests.scoreboard.transactional_targets import GridTarget
from tests.transactional.appdb import AppDb

ROOT = Path(__file__).resolve().parents[2]
#: A killing life that never reaches its point (the queue ran dry) is ended and reported.
LIFE_LIMIT_S = 180.0
#: How long a life may take to start consuming (it prints ``up``).
LIFE_STARTUP_S = 60.0
#: How long the last lives may take to bring the row to its end state.
DRAIN_LIMIT_S = 300.0

#: (kill point, after how many handled deliveries); "none" is a last life.
Life = tuple[str, int]


@dataclass
class LivesReport:
    kills: Counter[str] = field(default_factory=Counter)  # point -> lives that died there
    ran: Counter[str] = field(default_factory=Counter)  # id -> handler runs acked
    dups: int = 0  # deliveries acked without running the handler (their id held)
    dup_ids: set[str] = field(default_factory=set)
    #: Ids whose commit a life died after, before their ack (each must come back as a copy).
    killed_after_commit: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class _Seat:
    def __init__(self, target: GridTarget, app_db: AppDb, index: int, report: LivesReport, out: Path) -> None:
        self.target, self.app_db, self.index, self.report, self.out = target, app_db, index, report, out
        self.last: subprocess.Popen[str] | None = None
        self.last_log = out / f"seat{index}-last.out"
        self.lives = 0
        self.lock = threading.Lock()

    def start(self, kill: str, after: int) -> tuple[subprocess.Popen[str], Path]:
        self.lives += 1
        log = self.out / f"seat{self.index}-life{self.lives}.out"
        env = dict(os.environ, ABTX_URL=self.target.url(), ABTX_QUEUE=self.target.queue, ABTX_KILL=kill,
                   ABTX_AFTER=str(after),
                   ABTX_OPTIONS=json.dumps({**self.target.options, **self.target.seat_options[self.index]}),
                   ABTX_DB=json.dumps({"kind": self.app_db.kind, "target": self.app_db.target,
                                       "prefix": self.app_db.prefix}))
        with log.open("w") as sink:
            process = subprocess.Popen([sys.executable, "-m", "tests.scoreboard.transactional_consumer"], cwd=ROOT,
                                       env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)
        return process, log

    def killing_life(self, kill: str, after: int) -> None:
        process, log = self.start(kill, after)
        try:
            code = process.wait(LIFE_LIMIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
        lines = self.read(log)
        if code == -signal.SIGKILL and any(line.startswith(f"killing {kill}") for line in lines):
            with self.lock:
                self.report.kills[kill] += 1
        else:
            self.report.errors.append(f"seat {self.index} life {self.lives} ({kill} after {after}) ended "
                                      f"{code}, not at its point: {redact(' | '.join(lines[-3:]))[:300]}")

    def last_life(self) -> None:
        self.last, self.last_log = self.start("none", 0)

    def stop(self) -> None:
        if self.last is None:
            return
        # The row can be done before this life is up (the other seat drained the queue while
        # it was still importing): SIGTERM then would end it before its handler is set (-15).
        last, last_log = self.last, self.last_log
        try:
            eventually(lambda: last.poll() is not None or "up" in last_log.read_text().split(), LIFE_STARTUP_S,
                       message=f"seat {self.index}'s last life up")
        except AssertionError as exc:
            self.report.errors.append(str(exc))
        self.last.send_signal(signal.SIGTERM)
        try:
            code = self.last.wait(60)
        except subprocess.TimeoutExpired:
            self.last.kill()
            code = self.last.wait()
        lines = self.read(self.last_log)
        if code != 0:
            self.report.errors.append(f"seat {self.index} last life ended {code}: "
                                      f"{redact(' | '.join(lines[-3:]))[:300]}")

    def read(self, log: Path) -> list[str]:
        lines = [line for line in log.read_text().splitlines() if line]
        for line in lines:
            word, _, message_id = line.partition(" ")
            if word == "ran":
                self.report.ran[message_id] += 1
            elif word == "dup":
                self.report.dups += 1
                self.report.dup_ids.add(message_id)
            elif line.startswith("killing after_commit "):
                self.report.killed_after_commit.append(line.split()[-1])
        return lines


def run_lives(target: GridTarget, app_db: AppDb, plans: list[list[Life]], done: Callable[[], bool]) -> LivesReport:
    """Run one seat per plan (its killing lives, then a last life each; ``turns``: interleaved,
    one process at a time, and one last life), until *done*; stop the last lives."""
    report = LivesReport()
    out = Path(tempfile.mkdtemp(prefix="abtx-lives-"))
    seats = [_Seat(target, app_db, i, report, out) for i in range(len(plans))]
    try:
        if target.sharing == "turns":
            for step in range(max(len(plan) for plan in plans)):
                for seat, plan in zip(seats, plans, strict=True):
                    if step < len(plan):
                        seat.killing_life(*plan[step])
            seats[0].last_life()
        else:
            def seat_run(seat: _Seat, plan: list[Life]) -> None:
                try:
                    for kill, after in plan:
                        seat.killing_life(kill, after)
                except Exception as exc:  # reported in the row, never lost in a thread
                    report.errors.append(f"seat {seat.index}: {type(exc).__name__}: {redact(str(exc))[:200]}")

            threads = [threading.Thread(target=seat_run, args=(seat, plan)) for seat, plan in zip(seats, plans,
                                                                                                   strict=True)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            # Last lives only once every killing life reached its point: a last life started
            # while the other seat still had kills to make drained the queue under it, and that
            # life never got its deliveries (seen on NATS: 'ended None, not at its point').
            for seat in seats:
                seat.last_life()
        try:
            eventually(done, timeout=DRAIN_LIMIT_S, message="every effect in and the broker empty")
        except AssertionError as exc:
            report.errors.append(str(exc))
    finally:
        for seat in seats:
            seat.stop()
    return report


def competing_plans(after: tuple[int, int] = (10, 15)) -> list[list[Life]]:
    """Two seats, each killed twice, at both points, in opposite orders."""
    a, b = after
    return [[("before_commit", a), ("after_commit", a)], [("after_commit", b), ("before_commit", b)]]
