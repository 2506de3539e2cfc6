"""The orders rules, vectorised with numpy: fold a micro-batch into a bucket's state.

The rules (docs/pipelines.md states them for users) depend only on the set of distinct
events an order has, never on how those events were cut into micro-batches:

- Exact duplicates (same courier, status, position and event time) count once.
- An active order's value comes from its latest event by event time; on equal times the
  later lifecycle status wins (so a terminal beats a non-terminal), then the greater
  (courier_id, lat, lon), so that the choice never depends on arrival.
- first_seen / last_seen are the earliest / latest event time of its distinct events,
  `updates` their number.
- A DELIVERED or CANCELLED event ends the order whenever it arrives: its events are
  dropped and an *ended marker* (order id, latest event time) is kept; every later event
  for that order is ignored while the marker lives.
- The *horizon* is the latest event time the job has seen minus the retention (in Spark:
  the event-time watermark, as it stood before the micro-batch). A marker older than the
  horizon is forgotten, and an event older than it is too late and ignored: so a stray
  event from before an order's end never starts it again, and state is bounded by the
  retention.

State per bucket: the distinct events of its active orders and the ended markers.
Each micro-batch touches only the orders it has events for; no per-order Python runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipelines.pandas_state import empty_frame, member_of

STATUSES = ("CREATED", "PICKED_UP", "IN_TRANSIT", "DELIVERED", "CANCELLED")
TERMINAL_STATUSES = ("DELIVERED", "CANCELLED")

EVENT_COLUMNS = ("order_id", "courier_id", "status", "lat", "lon", "event_ms")
EVENT_DTYPES = {
    "order_id": "str", "courier_id": "str", "status": "str", "lat": "float64",
    "lon": "float64", "event_ms": "int64",
}  # fmt: skip
MARKER_DTYPES = {"order_id": "str", "ended_ms": "int64"}
CHANGED_COLUMNS = (
    "order_id", "courier_id", "status", "lat", "lon", "updates", "first_seen", "last_seen",
    "deleted",
)  # fmt: skip

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
"""How far (event time) behind the newest event an ended order's marker is kept."""


@dataclass(frozen=True)
class BucketState:
    """The state of one bucket of orders: events of the active ones, markers of the ended."""

    events: pd.DataFrame  # EVENT_DTYPES: distinct events of the active orders
    markers: pd.DataFrame  # MARKER_DTYPES: ended orders and their latest event time

    @classmethod
    def empty(cls) -> BucketState:
        """The state before any event."""
        return cls(empty_frame(EVENT_DTYPES), empty_frame(MARKER_DTYPES))


def fold(
    state: BucketState, batch: pd.DataFrame, horizon_ms: int
) -> tuple[BucketState, pd.DataFrame]:
    """(bucket state, a micro-batch of its events, the horizon) -> (new state, changes).

    `batch` has (at least) EVENT_COLUMNS. The changed orders (CHANGED_COLUMNS) are the
    active orders that got a new distinct event, and (deleted=True) the orders that ended
    in this batch and had been published before it (an order that starts and ends in one
    batch is never written).
    """
    markers = state.markers[state.markers.ended_ms.to_numpy() >= horizon_ms]
    fresh = batch[
        (batch.event_ms.to_numpy() >= horizon_ms) & ~member_of(batch.order_id, markers.order_id)
    ][list(EVENT_COLUMNS)]
    if fresh.empty:
        return BucketState(state.events, markers.reset_index(drop=True)), _empty_changes()
    touched = member_of(state.events.order_id, fresh.order_id.unique())
    # Known events first, so that a known event sent again is the one kept (not new).
    candidates = pd.concat(
        [state.events[touched].assign(new=False), fresh.assign(new=True)], ignore_index=True
    ).drop_duplicates(subset=list(EVENT_COLUMNS), keep="first")
    orders = _per_order(candidates)
    ended = orders.ended.to_numpy()
    kept = candidates[~member_of(candidates.order_id, orders.order_id[ended])].drop(columns="new")
    new_markers = orders.loc[ended, ["order_id", "last_seen"]]
    new_state = BucketState(
        pd.concat([state.events[~touched], kept], ignore_index=True),
        pd.concat([markers, new_markers.set_axis(list(MARKER_DTYPES), axis=1)], ignore_index=True),
    )
    # Written: orders with a new distinct event, except ended ones never published.
    written = orders.changed.to_numpy() & (~ended | orders.published.to_numpy())
    changes = orders[written].assign(deleted=ended[written])
    return new_state, changes[list(CHANGED_COLUMNS)].reset_index(drop=True)


def _per_order(events: pd.DataFrame) -> pd.DataFrame:
    """One row per order of `events` (with a `new` column): its value and what happened."""
    order = pd.factorize(events.order_id, sort=True)[0]
    courier = pd.factorize(events.courier_id, sort=True)[0]
    rank = _STATUS_INDEX.get_indexer(events.status)
    event_ms = events.event_ms.to_numpy()
    # Sorted per order by the rule's precedence: the last row of each order is its value.
    by = np.lexsort((events.lon.to_numpy(), events.lat.to_numpy(), courier, rank, event_ms, order))
    o = order[by]
    firsts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
    lasts = np.r_[firsts[1:] - 1, len(o) - 1]
    latest = by[lasts]

    def any_per_order(flags: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(flags[by], firsts)

    new = events.new.to_numpy()
    return pd.DataFrame(
        {
            "order_id": events.order_id.to_numpy()[latest],
            "courier_id": events.courier_id.to_numpy()[latest],
            "status": events.status.to_numpy()[latest],
            "lat": events.lat.to_numpy()[latest],
            "lon": events.lon.to_numpy()[latest],
            "updates": lasts - firsts + 1,
            "first_seen": event_ms[by[firsts]],
            "last_seen": event_ms[latest],
            "ended": any_per_order(rank >= _FIRST_TERMINAL_RANK),
            "changed": any_per_order(new),
            "published": any_per_order(~new),
        }
    )


def _empty_changes() -> pd.DataFrame:
    return pd.DataFrame(columns=list(CHANGED_COLUMNS))


_STATUS_INDEX = pd.Index(STATUSES)
_FIRST_TERMINAL_RANK = min(STATUSES.index(status) for status in TERMINAL_STATUSES)
