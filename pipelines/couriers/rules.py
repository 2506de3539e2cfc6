"""The courier rules, vectorised with pandas: fold a micro-batch into the job's state.

Figures per courier (docs/pipelines.md states them for users), all built on the orders
rules (pipelines.order_events.lifecycle), which decide when an order is active and when it ended:

- `active`: the active orders whose value (their latest event) names this courier.
- `delivered` / `cancelled`: the orders that ended with a DELIVERED / CANCELLED event naming
  this courier. An ended order never comes back, so it is counted once.
- The position (`lat`, `lon`, `seen_ms`): the courier's latest event by event time, ties
  broken like the orders' (later status, then greater lat, lon), over all its events that
  are not too late, also those the orders rules ignore because their order has ended: a
  courier app pinging after a delivery still says where the courier is.

State: the orders' state (every order, whatever its courier, since an order may change
courier) plus one row per courier. The whole state is one group, so this job runs its
state step in one task: fine for thousands of active orders, not for millions.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from pipelines.order_events import lifecycle as orders
from pipelines.pandas_state import empty_frame

COURIER_DTYPES = {
    "courier_id": "str", "active": "int64", "delivered": "int64", "cancelled": "int64",
    "seen_ms": "int64", "seen_rank": "int64", "lat": "float64", "lon": "float64",
}  # fmt: skip
COUNTS = ("active", "delivered", "cancelled")
SEEN = ("seen_ms", "seen_rank", "lat", "lon")  # the position's precedence, then the position
ENDINGS = {"DELIVERED": "delivered", "CANCELLED": "cancelled"}  # terminal status -> count


@dataclass(frozen=True)
class CourierState:
    """The couriers job's state for one group: every order, and one row per courier."""

    orders: orders.BucketState  # every order's (one bucket holding them all)
    couriers: pd.DataFrame  # COURIER_DTYPES, one row per courier seen

    @classmethod
    def empty(cls) -> CourierState:
        """The state before any event."""
        return cls(orders.BucketState.empty(), empty_frame(COURIER_DTYPES))


def fold(
    state: CourierState, batch: pd.DataFrame, horizon_ms: int
) -> tuple[CourierState, pd.DataFrame]:
    """(state, a micro-batch of events, the horizon) -> (new state, changed couriers).

    `batch` has (at least) orders.EVENT_COLUMNS; the changed couriers are COURIER_DTYPES
    rows whose figures differ from before the batch (a courier seen first is changed).
    """
    fresh = _ranked(batch[batch.event_ms.to_numpy() >= horizon_ms])
    new_orders, _ = orders.fold(state.orders, fresh, horizon_ms)
    ended = _endings(state.orders.markers, new_orders.markers, fresh)
    before = state.couriers.set_index("courier_id")
    seen = _latest(pd.concat([before.reset_index(), _seen(fresh)]), "courier_id", SEEN)
    after = seen.set_index("courier_id")[list(SEEN)]
    after["active"] = _active(new_orders.events).reindex(after.index, fill_value=0)
    for status, count in ENDINGS.items():
        added = ended[ended.status == status].courier_id.value_counts()
        known = before[count].reindex(after.index, fill_value=0)
        after[count] = known + added.reindex(after.index, fill_value=0)
    after = after[list(COURIER_DTYPES)[1:]].reset_index().astype(COURIER_DTYPES)
    changed = after[_differs(after, before)]
    return CourierState(new_orders, after), changed.reset_index(drop=True)


def _ranked(events: pd.DataFrame) -> pd.DataFrame:
    return events.assign(rank=_STATUS_INDEX.get_indexer(events.status))


def _latest(events: pd.DataFrame, key: str, precedence: tuple[str, ...]) -> pd.DataFrame:
    """Each key's row that comes last by `precedence` (the rules' "latest")."""
    return events.sort_values([key, *precedence]).drop_duplicates(key, keep="last")


def _seen(fresh: pd.DataFrame) -> pd.DataFrame:
    """Each courier's latest event of the batch, as position rows."""
    rows = fresh.rename(columns={"event_ms": "seen_ms", "rank": "seen_rank"})
    return _latest(rows[["courier_id", *SEEN]], "courier_id", SEEN)


def _active(events: pd.DataFrame) -> pd.Series:
    """Active orders per courier: the courier of each active order's latest event."""
    ranked = _ranked(events)
    latest = _latest(ranked, "order_id", ("event_ms", "rank", "courier_id", "lat", "lon"))
    return latest.courier_id.value_counts()


def _endings(old: pd.DataFrame, new: pd.DataFrame, fresh: pd.DataFrame) -> pd.DataFrame:
    """(order_id, courier_id, status) of the orders this batch ended.

    An order ended by this batch has a marker now that it had not before (compared with
    its end time: a forgotten marker may come back for a new order with that id). The
    event that ended it is its latest terminal event of the batch.
    """
    was = pd.MultiIndex.from_frame(old[["order_id", "ended_ms"]])
    now = new[~pd.MultiIndex.from_frame(new[["order_id", "ended_ms"]]).isin(was)]
    terminal = fresh[fresh.status.isin(list(ENDINGS)) & fresh.order_id.isin(now.order_id)]
    ending = _latest(terminal, "order_id", ("event_ms", "rank", "courier_id", "lat", "lon"))
    return ending[["order_id", "courier_id", "status"]]


def _differs(after: pd.DataFrame, before: pd.DataFrame) -> pd.Series:
    """Per row of `after`: a new courier, or one whose figures changed."""
    old = before.reindex(after.courier_id)
    columns = list(COURIER_DTYPES)[1:]
    same = (old[columns].to_numpy() == after[columns].to_numpy()).all(axis=1)
    return pd.Series(~same, index=after.index)


_STATUS_INDEX = pd.Index(orders.STATUSES)
