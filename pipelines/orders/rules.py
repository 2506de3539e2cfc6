"""The orders pipeline's rules, vectorised with pandas: fold a micro-batch into order state.

Precisely (also in docs/pipelines.md):
- Within one micro-batch an order's events are applied in event_time order; on equal
  event_time the later lifecycle status goes first, so a DELIVERED that shares a timestamp
  with an IN_TRANSIT wins.
- An event is *accepted* only if its event_time is strictly later than the order's
  last_seen. Duplicates (same event_time) and late events (earlier than last_seen) are
  ignored, so nothing moves an order backwards. `updates` counts accepted events.
- first_seen is the event_time of the first accepted event; last_seen of the latest.
- An accepted DELIVERED or CANCELLED event ends the order: its state row becomes a terminal
  marker (status DELIVERED/CANCELLED, expires_at > 0) that makes every later event for that
  order be ignored until the marker expires.

Applied to many orders at once, those rules say: sort by (order, event_time, status rank
descending); the accepted events are the first event of each distinct event_time later
than the order's last_seen, up to and including the first terminal one. No per-order
Python runs, so the cost is per micro-batch and per row, not per order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

STATUSES = ("CREATED", "PICKED_UP", "IN_TRANSIT", "DELIVERED", "CANCELLED")
TERMINAL_STATUSES = ("DELIVERED", "CANCELLED")

EVENT_COLUMNS = ("order_id", "courier_id", "status", "lat", "lon", "event_ms")
STATE_DTYPES = {
    "order_id": "str", "courier_id": "str", "status": "str", "lat": "float64",
    "lon": "float64", "first_seen": "int64", "last_seen": "int64", "updates": "int64",
    "expires_at": "int64",  # processing time a terminal marker is dropped at; 0 if active
}  # fmt: skip
CHANGED_COLUMNS = (
    "order_id", "courier_id", "status", "lat", "lon", "updates", "first_seen", "last_seen",
    "deleted",
)  # fmt: skip
_NEVER = np.iinfo(np.int64).max


def empty_state() -> pd.DataFrame:
    return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in STATE_DTYPES.items()})


def expire(state: pd.DataFrame, now_ms: int) -> pd.DataFrame:
    """Drop the terminal markers whose time is up; their orders may start again."""
    expires_at = state.expires_at.to_numpy()
    expired = (expires_at > 0) & (expires_at <= now_ms)
    return state[~expired] if expired.any() else state


def fold(
    state: pd.DataFrame, events: pd.DataFrame, now_ms: int, terminal_ttl_ms: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(orders' state, a micro-batch of their events) -> (new state, changed orders).

    `state` has STATE_DTYPES columns, one row per order; `events` has (at least)
    EVENT_COLUMNS. The changed orders (CHANGED_COLUMNS) are the active orders an accepted
    event changed, and (deleted=True) the orders that ended and had been published before
    this batch. Plain numpy inside: pandas operations cost too much per call.
    """
    known = expire(state, now_ms)
    if events.empty:
        return known, pd.DataFrame(columns=list(CHANGED_COLUMNS))
    # One integer code per order: known orders are 0..len(known)-1, in their row order.
    codes, _ = pd.factorize(np.concatenate([known.order_id.to_numpy(), events.order_id.to_numpy()]))
    order = codes[len(known) :]
    event_ms = events.event_ms.to_numpy()
    rank = _STATUS_INDEX.get_indexer(events.status)
    # Events must be later than last_seen; a marker bars every event; new orders bar none.
    bar = np.full(codes.max() + 1, -1, dtype=np.int64)
    bar[: len(known)] = np.where(
        known.expires_at.to_numpy() == 0, known.last_seen.to_numpy(), _NEVER
    )
    by_time = np.lexsort((-rank, event_ms, order))  # per order, in application order
    o, t = order[by_time], event_ms[by_time]
    first_at_time = np.ones(len(o), dtype=bool)
    first_at_time[1:] = (o[1:] != o[:-1]) | (t[1:] != t[:-1])
    candidates = by_time[first_at_time & (t > bar[o])]
    # Accept up to and including each order's first terminal event.
    o, ends = order[candidates], rank[candidates] >= _FIRST_TERMINAL_RANK
    starts = _group_starts(o)
    ends_so_far = np.cumsum(ends)
    start_of_row = np.maximum.accumulate(np.where(starts, np.arange(len(o)), 0))
    ends_before = ends_so_far - ends - (ends_so_far[start_of_row] - ends[start_of_row])
    accepted, o = candidates[ends_before == 0], o[ends_before == 0]
    if len(accepted) == 0:
        return known, pd.DataFrame(columns=list(CHANGED_COLUMNS))

    firsts = np.flatnonzero(_group_starts(o))
    lasts = np.r_[firsts[1:] - 1, len(o) - 1]
    latest, changed_code = accepted[lasts], o[lasts]
    existed = changed_code < len(known)
    first_seen, updates = event_ms[accepted[firsts]], lasts - firsts + 1
    first_seen[existed] = known.first_seen.to_numpy()[changed_code[existed]]
    updates[existed] += known.updates.to_numpy()[changed_code[existed]]
    ended = rank[latest] >= _FIRST_TERMINAL_RANK
    changed = pd.DataFrame(
        {
            "order_id": events.order_id.to_numpy()[latest],
            "courier_id": events.courier_id.to_numpy()[latest],
            "status": events.status.to_numpy()[latest],
            "lat": events.lat.to_numpy()[latest],
            "lon": events.lon.to_numpy()[latest],
            "first_seen": first_seen,
            "last_seen": event_ms[latest],
            "updates": updates,
            "expires_at": np.where(ended, now_ms + terminal_ttl_ms, 0),
        }
    ).astype(STATE_DTYPES)
    unchanged = np.ones(len(known), dtype=bool)
    unchanged[changed_code[existed]] = False
    new_state = pd.concat([known[unchanged], changed], ignore_index=True)
    # An order that started and ended inside this batch was never published: no tombstone.
    published = ~ended | existed
    return new_state, changed[published].assign(deleted=ended[published])[list(CHANGED_COLUMNS)]


_STATUS_INDEX = pd.Index(STATUSES)
_FIRST_TERMINAL_RANK = min(STATUSES.index(status) for status in TERMINAL_STATUSES)


def _group_starts(sorted_codes: np.ndarray) -> np.ndarray:
    starts = np.ones(len(sorted_codes), dtype=bool)
    starts[1:] = sorted_codes[1:] != sorted_codes[:-1]
    return starts
