"""``ackbridge outbox relay``: the relay as a command, on a sqlite3 outbox and a
PostgreSQL one, checked in the database (outbox empty, the refused row kept with
its reason) and on the broker (the rows in the queue, under their ids)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ackbridge
from ackbridge.transactional import Outbox
from tests.transactional.appdb import AppDb

ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))


def test_outbox_relay_command(app_db: AppDb, tmp_path: Path) -> None:
    from tests.local.harness import LocalHarness

    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        db = app_db.connect()
        outbox = Outbox(table=app_db.outbox)
        outbox.create_tables(db)
        for i in range(7):
            outbox.publish(db, queue, f"c{i}".encode(), message_id=f"c{i}")
        outbox.publish(db, queue, harness.oversized_body(), message_id="too-big")
        db.commit()
        db.close()
        target = f"sqlite:///{app_db.target}" if app_db.kind == "sqlite" else app_db.target
        done = subprocess.run([ACKBRIDGE, "outbox", "relay", harness.url(), "--db", target, "--table", app_db.outbox,
                               "--batch", "3", "--idle", "0.5", "--json"], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, COLUMNS="80"), check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        assert (result["confirmed"], result["refused"], result["unknown"], result["backlog"]) == (7, 1, 0, 0)
        assert app_db.rows(f"SELECT count(*) FROM {app_db.outbox}")[0][0] == 0
        [(message_id, reason)] = app_db.rows(f"SELECT message_id, reason FROM {app_db.outbox}_refused")
        assert message_id == "too-big" and reason
        with ackbridge.connect(harness.url()) as conn:
            consumer = conn.consume(queue, prefetch=10)
            got = []
            while (d := consumer.get(timeout=2)) is not None:
                got.append(d.message_id)
                d.ack()
            consumer.close()
        assert got == [f"c{i}" for i in range(7)]
    finally:
        harness.cleanup()


def test_outbox_relay_command_reports_a_bad_database(tmp_path: Path) -> None:
    done = subprocess.run([ACKBRIDGE, "outbox", "relay", f"local://{tmp_path}/b.db", "--db",
                           "postgresql://someone:s3cret-pw@127.0.0.1:1/nothing", "--idle", "0.1", "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert json.loads(done.stdout)["error"]
