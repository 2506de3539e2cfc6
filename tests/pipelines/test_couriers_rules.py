"""The courier rules without Spark: figures across orders, reassignment, ends, positions.

The last test is the property at the rules' level: a generated stream cut into random
micro-batches, folded batch by batch, always compacts to the one-event-at-a-time reference.
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd
import pytest

from pipelines.couriers.reference import ExpectedCouriers
from pipelines.couriers.rules import CourierState, fold
from pipelines.order_events.lifecycle import EVENT_COLUMNS
from pipelines.orders.generator import StreamShape, generate
from pipelines.orders.reference import iso
from pipelines.pandas_state import NO_HORIZON
from tests.pipelines.test_orders_rules import RETENTION, to_events

FIGURES = ("courier_id", "active", "delivered", "cancelled", "seen_ms", "lat")


def events(*rows: tuple[str, str, str, int, float]) -> pd.DataFrame:
    """(order, courier, status, event_ms, lat) rows; lon 2.0."""
    return pd.DataFrame(
        [(order, courier, status, lat, 2.0, ms) for order, courier, status, ms, lat in rows],
        columns=list(EVENT_COLUMNS),
    )


def run(*batches: pd.DataFrame) -> tuple[CourierState, list[pd.DataFrame]]:
    """Fold the batches in turn, the horizon following them as Spark's watermark does."""
    state, changes, horizon = CourierState.empty(), [], NO_HORIZON
    for batch in batches:
        state, changed = fold(state, batch, horizon)
        changes.append(changed)
        horizon = max(horizon, int(batch.event_ms.max()) - RETENTION)
    return state, changes


def figures(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    return sorted(frame[list(FIGURES)].itertuples(index=False, name=None))


def test_active_orders_are_counted_across_orders_and_ends_once() -> None:
    state, changes = run(
        events(("a", "c1", "CREATED", 10, 1.0), ("b", "c1", "CREATED", 20, 2.0)),
        events(("a", "c1", "DELIVERED", 30, 3.0), ("c", "c2", "CREATED", 25, 5.0)),
        events(("a", "c1", "DELIVERED", 30, 3.0), ("b", "c1", "CANCELLED", 15, 1.5)),
    )
    assert figures(changes[0]) == [("c1", 2, 0, 0, 20, 2.0)]
    assert figures(changes[1]) == [("c1", 1, 1, 0, 30, 3.0), ("c2", 1, 0, 0, 25, 5.0)]
    # The duplicate delivery counts nothing; the late cancel ends b, the position stays.
    assert figures(changes[2]) == [("c1", 0, 1, 1, 30, 3.0)]
    assert figures(state.couriers) == [("c1", 0, 1, 1, 30, 3.0), ("c2", 1, 0, 0, 25, 5.0)]


def test_a_reassigned_order_moves_to_the_courier_of_its_latest_event() -> None:
    _, changes = run(
        events(("a", "c1", "PICKED_UP", 10, 1.0)),
        events(("a", "c2", "IN_TRANSIT", 20, 2.0)),
        events(("a", "c1", "IN_TRANSIT", 15, 1.5)),  # late and older: a stays with c2
    )
    assert figures(changes[1]) == [("c1", 0, 0, 0, 10, 1.0), ("c2", 1, 0, 0, 20, 2.0)]
    assert figures(changes[2]) == [("c1", 0, 0, 0, 15, 1.5)]  # only c1's position moved


def test_a_ping_after_the_end_moves_the_position_but_never_the_order_back() -> None:
    _, changes = run(
        events(("a", "c1", "CREATED", 10, 1.0)),
        events(("a", "c1", "DELIVERED", 20, 2.0)),
        events(("a", "c1", "IN_TRANSIT", 40, 4.0)),
    )
    assert [figures(c) for c in changes[1:]] == [
        [("c1", 0, 1, 0, 20, 2.0)],
        [("c1", 0, 1, 0, 40, 4.0)],
    ]


def test_an_order_that_starts_and_ends_in_one_batch_still_counts() -> None:
    _, [changed] = run(events(("a", "c1", "CREATED", 10, 1.0), ("a", "c1", "CANCELLED", 11, 1.0)))
    assert figures(changed) == [("c1", 0, 0, 1, 11, 1.0)]


def test_nothing_changed_writes_nothing() -> None:
    _, changes = run(
        events(("a", "c1", "CREATED", 10, 1.0)),
        events(("a", "c1", "CREATED", 10, 1.0)),  # a duplicate
        events(("b", "c1", "IN_TRANSIT", 5, 1.0), ("b", "c1", "DELIVERED", 6, 1.0)),
    )
    assert [len(c) for c in changes] == [1, 0, 1]  # b: delivered moves, the position not


@pytest.mark.parametrize("seed", range(20))
def test_any_cut_into_micro_batches_compacts_to_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    shape = StreamShape(orders=80, couriers=6, max_lag_ms=300_000, duplicates=0.2, strays=0.3)
    records = generate(shape, seed=seed)
    expected = ExpectedCouriers().run(records).figures()
    frame = to_events(records)
    cuts = sorted(rng.sample(range(1, len(frame)), rng.randint(1, 12)))
    state, content, horizon = CourierState.empty(), {}, NO_HORIZON
    for start, end in zip([0, *cuts], [*cuts, len(frame)], strict=True):
        batch = frame.iloc[start:end]
        state, changed = fold(state, batch, horizon)
        for row in changed.itertuples(index=False):
            content[row.courier_id] = {
                "courier_id": row.courier_id, "active_orders": row.active,
                "delivered": row.delivered, "cancelled": row.cancelled,
                "position": {"lat": row.lat, "lon": row.lon}, "last_seen": iso(row.seen_ms),
            }  # fmt: skip
        horizon = max(horizon, int(batch.event_ms.max()) - RETENTION)
    assert content == expected
    assert sum(f["delivered"] + f["cancelled"] for f in expected.values()) > 0
