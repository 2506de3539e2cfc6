"""The orders rules without Spark: distinct events, latest wins, terminals, retention.

The last test is the property of the issue at the rules' level, cheap enough for many
seeds: a generated stream cut into random micro-batches, folded batch by batch, always
compacts to what the one-event-at-a-time reference model says.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pandas as pd
import pytest

from pipelines.order_events.lifecycle import EVENT_COLUMNS, BucketState, fold
from pipelines.orders.generator import RawRecord, StreamShape, generate
from pipelines.orders.reference import ExpectedOrders, iso, millis
from pipelines.pandas_state import NO_HORIZON

DAY = 24 * 3600 * 1000
RETENTION = 7 * DAY


def events(*rows: tuple[str, str, int] | tuple[str, str, int, float]) -> pd.DataFrame:
    """(order, status, event_ms[, lat]) rows; courier c1, lon 2.0."""
    return pd.DataFrame(
        [(order, "c1", status, *(rest or (1.0,)), 2.0, ms) for order, status, ms, *rest in rows],
        columns=list(EVENT_COLUMNS),
    )


def rows(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(frame[list(columns)].itertuples(index=False, name=None))


def run(*batches: pd.DataFrame) -> tuple[BucketState, list[Any]]:
    """Fold the batches in turn, the horizon following them as Spark's watermark does."""
    state, changes, horizon = BucketState.empty(), [], NO_HORIZON
    for batch in batches:
        state, changed = fold(state, batch, horizon)
        changes.append(changed)
        horizon = max(horizon, int(batch.event_ms.max()) - RETENTION)
    return state, changes


VALUE = ("order_id", "status", "lat", "first_seen", "last_seen", "updates", "deleted")


def test_out_of_order_events_in_one_batch_give_the_latest_value() -> None:
    _, [changed] = run(
        events(("a", "IN_TRANSIT", 30, 3.0), ("a", "CREATED", 10), ("a", "PICKED_UP", 20))
    )
    assert rows(changed, *VALUE) == [("a", "IN_TRANSIT", 3.0, 10, 30, 3, False)]


def test_a_late_event_in_a_later_batch_counts_and_moves_first_seen_back() -> None:
    _, [_, changed] = run(
        events(("a", "PICKED_UP", 20), ("a", "IN_TRANSIT", 30, 3.0)),
        events(("a", "CREATED", 5, 9.0)),
    )
    # Same as one batch of all three: latest value unchanged, first_seen and updates move.
    assert rows(changed, *VALUE) == [("a", "IN_TRANSIT", 3.0, 5, 30, 3, False)]


def test_exact_duplicates_change_nothing_and_write_nothing() -> None:
    first, _ = run(events(("a", "CREATED", 10), ("a", "CREATED", 10)))
    again, changed = fold(first, events(("a", "CREATED", 10)), NO_HORIZON)
    assert changed.empty
    assert rows(again.events, *EVENT_COLUMNS) == rows(first.events, *EVENT_COLUMNS)
    assert len(first.events) == 1


def test_a_terminal_ends_the_order_even_when_older_than_what_was_applied() -> None:
    state, [_, changed] = run(
        events(("a", "CREATED", 10), ("a", "IN_TRANSIT", 50)),
        events(("a", "DELIVERED", 40)),  # earlier than last_seen, later batch: still ends
    )
    assert rows(changed, "order_id", "deleted") == [("a", True)]
    assert state.events.empty
    assert rows(state.markers, "order_id", "ended_ms") == [("a", 50)]


def test_an_ended_order_never_comes_back() -> None:
    state, [_, _, late, much_later] = run(
        events(("a", "CREATED", 10)),
        events(("a", "CANCELLED", 20)),
        events(("a", "IN_TRANSIT", 15), ("a", "IN_TRANSIT", 25)),
        events(("a", "CREATED", 3 * DAY)),  # within retention of the marker
    )
    assert late.empty and much_later.empty
    assert state.events.empty


def test_an_order_that_starts_and_ends_in_one_batch_is_never_written() -> None:
    state, [changed] = run(events(("a", "IN_TRANSIT", 10), ("a", "CANCELLED", 10)))
    assert changed.empty
    assert rows(state.markers, "order_id") == [("a",)]


@pytest.mark.parametrize("arrival", [[0, 1], [1, 0]])
def test_equal_event_times_resolve_the_same_whatever_the_arrival(arrival: list[int]) -> None:
    same_time = [events(("a", "IN_TRANSIT", 10, 1.0)), events(("a", "IN_TRANSIT", 10, 4.0))]
    _, [*_, changed] = run(events(("a", "CREATED", 5)), *(same_time[i] for i in arrival))
    assert rows(changed, "status", "lat", "updates") == [("IN_TRANSIT", 4.0, 3)]


def test_markers_are_kept_for_the_retention_then_forgotten_with_too_late_events() -> None:
    state, changes = run(
        events(("a", "CREATED", 0), ("b", "CREATED", 0)),
        events(("a", "DELIVERED", DAY)),
        events(("b", "IN_TRANSIT", 8 * DAY - 1)),  # clock 8 d - 1 ms: a's marker lives
        events(("a", "IN_TRANSIT", 2 * DAY)),  # ignored by the marker
        events(("b", "IN_TRANSIT", 8 * DAY + 1)),  # the horizon passes a's end (1 d)
        events(("a", "IN_TRANSIT", DAY - 5)),  # before its end, older than the horizon
        events(("a", "CREATED", 9 * DAY)),  # newer than the horizon: a new order
    )
    assert [len(c) for c in changes] == [2, 1, 1, 0, 1, 0, 1]
    assert state.markers.empty
    assert rows(changes[-1], "order_id", "updates", "first_seen") == [("a", 1, 9 * DAY)]


def to_events(records: list[RawRecord]) -> pd.DataFrame:
    good = [orjson.loads(r.value) for r in records if r.bad_reason is None]
    return pd.DataFrame(
        [(e["order_id"], e["courier_id"], e["status"], float(e["lat"]), float(e["lon"]),
          millis(e["event_time"])) for e in good],
        columns=list(EVENT_COLUMNS),
    )  # fmt: skip


def apply(content: dict[str, Any], changed: pd.DataFrame) -> None:
    """What compaction keeps of the changed rows: the latest value per key."""
    for row in changed.itertuples(index=False):
        if row.deleted:
            content.pop(row.order_id, None)
        else:
            content[row.order_id] = {
                "order_id": row.order_id, "courier_id": row.courier_id, "status": row.status,
                "location": {"lat": row.lat, "lon": row.lon}, "updates": row.updates,
                "first_seen": iso(row.first_seen), "last_seen": iso(row.last_seen),
            }  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_any_cut_into_micro_batches_compacts_to_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    records = generate(StreamShape(orders=60, max_lag_ms=300_000, duplicates=0.2), seed=seed)
    expected = ExpectedOrders().run(records).active()
    frame = to_events(records)
    cuts = sorted(rng.sample(range(1, len(frame)), rng.randint(1, 12)))
    state, content, horizon = BucketState.empty(), {}, NO_HORIZON
    for start, end in zip([0, *cuts], [*cuts, len(frame)], strict=True):
        batch = frame.iloc[start:end]
        state, changed = fold(state, batch, horizon)
        apply(content, changed)
        horizon = max(horizon, int(batch.event_ms.max()) - RETENTION)
    assert content == expected
    assert set(state.events.order_id) == set(expected)
