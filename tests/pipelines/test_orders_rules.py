"""The orders rules without Spark: ordering, duplicates, lateness, terminal markers."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pipelines.orders.rules import (
    EVENT_COLUMNS,
    empty_state,
    fold,
)

NOW, TTL = 1_000, 60


def events(*rows: tuple[str, str, int] | tuple[str, str, int, float]) -> pd.DataFrame:
    """(order, status, event_ms[, lat]) rows; courier c1, lon 2.0."""
    return pd.DataFrame(
        [(order, "c1", status, *(rest or (1.0,)), 2.0, ms) for order, status, ms, *rest in rows],
        columns=list(EVENT_COLUMNS),
    )


def rows(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(frame[list(columns)].itertuples(index=False, name=None))


def test_out_of_order_events_in_one_batch_apply_in_event_time_order() -> None:
    state, changed = fold(
        empty_state(),
        events(("a", "IN_TRANSIT", 30, 3.0), ("a", "CREATED", 10), ("a", "PICKED_UP", 20)),
        NOW,
        TTL,
    )
    row = ("a", "IN_TRANSIT", 3.0, 10, 30, 3)
    assert rows(changed, "order_id", "status", "lat", "first_seen", "last_seen", "updates") == [row]
    assert rows(state, "order_id", "status", "lat", "first_seen", "last_seen", "updates") == [row]
    assert changed.deleted.tolist() == [False]


def test_duplicates_and_late_events_are_not_counted_and_do_not_move_back() -> None:
    first, _ = fold(empty_state(), events(("a", "CREATED", 10), ("a", "IN_TRANSIT", 30)), NOW, TTL)
    later, changed = fold(
        first, events(("a", "IN_TRANSIT", 30), ("a", "PICKED_UP", 20, 9.0)), NOW, TTL
    )
    assert changed.empty
    assert later.equals(first)


def test_terminal_event_leaves_a_marker_that_ignores_everything_after() -> None:
    active, _ = fold(empty_state(), events(("a", "CREATED", 10)), NOW, TTL)
    ended, changed = fold(active, events(("a", "DELIVERED", 40), ("a", "IN_TRANSIT", 50)), NOW, TTL)
    assert rows(changed, "order_id", "deleted", "updates") == [("a", True, 2)]
    assert rows(ended, "status", "last_seen", "expires_at") == [("DELIVERED", 40, NOW + TTL)]
    still, changed = fold(ended, events(("a", "IN_TRANSIT", 30), ("a", "IN_TRANSIT", 60)), NOW, TTL)
    assert changed.empty and still.equals(ended)


def test_an_expired_marker_lets_the_order_start_again() -> None:
    ended, _ = fold(empty_state(), events(("a", "CREATED", 10), ("a", "CANCELLED", 20)), NOW, TTL)
    again, changed = fold(ended, events(("a", "CREATED", 90)), NOW + TTL, TTL)
    assert rows(changed, "order_id", "status", "updates", "deleted") == [("a", "CREATED", 1, False)]
    assert rows(again, "order_id", "expires_at") == [("a", 0)]


def test_on_equal_event_time_the_later_lifecycle_status_wins() -> None:
    state, changed = fold(
        empty_state(), events(("a", "IN_TRANSIT", 10), ("a", "CANCELLED", 10)), NOW, TTL
    )
    assert changed.empty  # started and ended in one batch: never published
    assert rows(state, "status", "updates", "expires_at") == [("CANCELLED", 1, NOW + TTL)]


def test_orders_in_one_batch_are_folded_independently() -> None:
    known, _ = fold(empty_state(), events(("a", "CREATED", 10), ("b", "CREATED", 10)), NOW, TTL)
    state, changed = fold(
        known,
        events(("b", "PICKED_UP", 5), ("c", "CREATED", 7), ("a", "PICKED_UP", 12)),
        NOW,
        TTL,
    )
    assert rows(changed, "order_id", "status", "updates") == [
        ("a", "PICKED_UP", 2),
        ("c", "CREATED", 1),
    ]
    assert rows(state, "order_id", "status") == [
        ("a", "PICKED_UP"),
        ("b", "CREATED"),
        ("c", "CREATED"),
    ]
