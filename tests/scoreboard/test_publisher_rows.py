"""The publisher rows' CI tier (issue 15): every broker x {connection cut, broker restart} x {plain, retransmit}.

A row fails on LOST > 0, UNEXPECTED > 0, messages left in the queue, or when it
cannot run (never a skip). With retransmission + dedupe_window, every
attempted id must be delivered (bar what the broker refused, told to the
application, and what a broker whose capability table says "in memory until the
next save" lost itself: only ids it confirmed after its last save before the
kill, counted apart; anything else confirmed and never delivered is LOST) and
no copy may reach the application. The embedded process-kill cell's second
sends are the application's (replayed on a new publisher), not ackbridge's.
The full-size run is ``python -m tests.scoreboard.publisher --n 2000``
(docs/scoreboard.md). The scoring rule itself is checked on made-up histories
first (no broker).
"""

from __future__ import annotations

import pytest

from ackbridge.capabilities import Durability
from tests.conftest import require_port
from tests.scoreboard.publisher import cells, run_cell
from tests.scoreboard.publisher_rows import PubHistory, markdown, score
from tests.scoreboard.publisher_targets import Target

#: ids per cell in CI (a restart adds what is published while the broker is down)
N = 300

MARKS = {"mqtt": pytest.mark.mqtt, "rabbitmq": pytest.mark.rabbitmq, "amqp10": pytest.mark.amqp10,
         "nats": pytest.mark.nats, "rabbitmq-streams": pytest.mark.rabbitmq_streams}
#: Brokers on the shared ports (MQTT and NATS rows start private servers of their own).
PORTS = {"rabbitmq": (5672, "RabbitMQ"), "amqp10": (5672, "RabbitMQ (AMQP 1.0)"),
         "rabbitmq-streams": (5552, "RabbitMQ streams (rabbitmq_stream)")}

#: A restart of a broker on a shared port stops it for every other test too (run alone).
SHARED_RESTART = [pytest.mark.stops_shared_broker]
CELLS = [
    pytest.param(broker, fault, mode, id=f"{broker}-{fault}-{mode}",
                 marks=[pytest.mark.slow, *(m for k, m in MARKS.items() if broker.startswith(k)),
                        *(SHARED_RESTART if fault == "broker-restart" and broker.startswith(tuple(PORTS)) else [])])
    for broker, fault, mode in cells()
]


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("broker", "fault", "mode"), CELLS)
def test_publisher_row(broker: str, fault: str, mode: str) -> None:
    for prefix, (port, what) in PORTS.items():
        if broker.startswith(prefix):
            require_port(port, what)
            require_port(15672, "RabbitMQ management (bash scripts/brokers.sh)")
    row = run_cell(broker, fault, mode, N)
    table = markdown([row])
    print(table)
    assert not row.error, table
    assert row.injections == 1, table
    # The fault met publishes: confirms pending at the fault, unknowns (plain), sends again
    # (retransmit), or publishes made while a restart lasted. Publishes queued but not yet on
    # the wire are not resent, only sent late.
    met = row.pending_at_fault + row.indeterminate + row.retransmitted + row.published_during_fault
    assert met > 0, table
    assert row.lost == 0 and row.unexpected == 0, f"{table}\nLOST ids: {row.lost_timeline}"
    assert row.left in (0, None), table
    assert row.delivered >= row.confirmed - row.broker_lost, table
    # score() counts "lost by the broker" only on a kill and only where the capability table
    # declares a confirm in memory until the next save (LOSES_ON_KILL): never on a cut.
    assert fault != "connection-cut" or row.broker_lost == 0, table
    if broker == "mqtt-5" and fault == "broker-restart":
        # The allowance is read from the dead broker's store: only ids confirmed after its last save.
        # The fault waited for a save, so ids confirmed before it were in play (and all delivered).
        assert row.unsaved_s is not None and row.saved_before > 0, f"{table}\n{row.allowance_note()}"
        assert row.broker_lost <= row.unsaved, f"{table}\n{row.allowance_note()}"
    else:
        assert row.unsaved_s is None and row.broker_lost == 0, table
    # The application's replays (embedded process-kill: the killed publisher's unresolved ids, sent
    # again on a new publisher) are counted as such, never as ackbridge retransmissions.
    replays = fault == "process-kill" and mode == "retransmit"
    assert row.replayed == (row.pending_at_fault if replays else 0), table
    assert not replays or row.replayed > 0, table
    if mode == "retransmit":
        assert row.indeterminate == 0, table
        # A refusal is final and told to the application (MQTT 5 answers 0x10, no matching
        # subscribers, until the restarted broker's sessions subscribe again): not sent again.
        assert row.delivered == row.attempted - row.broker_lost - row.refused, f"{table}\nrefused {row.refused}"
        # A delivery after an ack that raised StaleDeliveryError is the message again, not a copy.
        assert row.app_duplicates == 0, f"{table}\nacks that raised StaleDeliveryError: {row.stale_acks}"
    assert row.passed, table


# ---- the scoring rule on made-up histories (no broker) ----------------------------------------
def _target(durability: Durability = Durability.UNTIL_NEXT_SAVE) -> Target:
    return Target("mqtt-5", "mqtt://-", {}, "q", "q", durability)


def _history(*, last_save: float | None, confirmed_at: dict[str, float], delivered: set[str]) -> PubHistory:
    """Ids confirmed at the given times (all before the kill at 10.0), some delivered."""
    h = PubHistory(fault_start=10.0, last_save=last_save)
    for message_id, at in confirmed_at.items():
        h.attempted.add(message_id)
        h.confirmed.add(message_id)
        h.resolved_at[message_id] = at
    h.confirmed_at_fault = set(confirmed_at)
    for message_id in delivered:
        h.delivered[message_id] += 1
    return h


CONFIRMED_AT = {"a": 8.0, "b": 9.4, "c": 9.6, "d": 9.9}


@pytest.mark.parametrize("mode", ["plain", "retransmit"])
def test_a_broker_kill_may_lose_only_what_it_confirmed_after_its_last_save(mode: str) -> None:
    # Saved at 9.5: c and d (confirmed after) are the declared window; both lost is allowed.
    row = score(_target(), "broker-restart", mode, _history(last_save=9.5, confirmed_at=CONFIRMED_AT,
                                                             delivered={"a", "b"}))
    assert (row.lost, row.broker_lost, row.unsaved, row.saved_before) == (0, 2, 2, 2), row
    assert row.unsaved_s == pytest.approx(0.5)
    assert row.passed, row


@pytest.mark.parametrize("mode", ["plain", "retransmit"])
def test_a_confirm_from_before_the_last_save_never_delivered_is_lost(mode: str) -> None:
    # b was confirmed at 9.4, before the save at 9.5: it was in the store, so its loss is LOST.
    row = score(_target(), "broker-restart", mode, _history(last_save=9.5, confirmed_at=CONFIRMED_AT,
                                                             delivered={"a", "c"}))
    assert (row.lost, row.broker_lost) == (1, 1), row
    assert "b: published" in row.lost_timeline and not row.passed, row


def test_a_broker_that_never_saved_may_lose_all_it_confirmed() -> None:
    row = score(_target(), "broker-restart", "plain", _history(last_save=float("-inf"), confirmed_at=CONFIRMED_AT,
                                                                delivered=set()))
    assert (row.lost, row.broker_lost, row.unsaved) == (0, 4, 4) and row.passed, row
    assert "never saved" in row.broker_lost_cell()


@pytest.mark.parametrize(("durability", "fault", "last_save"), [
    (Durability.UNTIL_NEXT_SAVE, "connection-cut", 9.5),  # a cut loses nothing the broker confirmed
    (Durability.UNTIL_NEXT_SAVE, "broker-restart", None),  # the last save unknown: no allowance
    (Durability.ON_DISK, "broker-restart", 9.5),  # the table promises disk: no allowance
], ids=["connection-cut", "last-save-unknown", "on-disk"])
def test_no_allowance_without_a_declared_window(durability: Durability, fault: str, last_save: float | None) -> None:
    row = score(_target(durability), fault, "plain", _history(last_save=last_save, confirmed_at=CONFIRMED_AT,
                                                              delivered={"a", "b"}))
    assert (row.lost, row.broker_lost) == (2, 0) and not row.passed, row


def test_only_the_delivery_after_a_stale_ack_is_not_a_copy() -> None:
    # a's ack raised StaleDeliveryError once: its second delivery is owed, its third is a copy.
    h = _history(last_save=None, confirmed_at={"a": 1.0, "b": 2.0}, delivered={"a", "b"})
    h.delivered["a"] += 1
    h.stale_acks["a"] += 1
    row = score(_target(Durability.ON_DISK), "connection-cut", "retransmit", h)
    assert (row.app_duplicates, row.stale_acks) == (0, 1) and row.passed, row
    h.delivered["a"] += 1
    row = score(_target(Durability.ON_DISK), "connection-cut", "retransmit", h)
    assert row.app_duplicates == 1 and not row.passed, row
    # b was never told its ack failed: a second delivery of it is a copy.
    h.delivered["a"] -= 1
    h.delivered["b"] += 1
    assert score(_target(Durability.ON_DISK), "connection-cut", "retransmit", h).app_duplicates == 1
