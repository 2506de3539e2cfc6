"""The orders pipeline: raw courier events -> one current value per active order.

Output value: {order_id, courier_id, status, location: {lat, lon}, updates, first_seen,
last_seen}; a DELIVERED or CANCELLED order becomes a tombstone. The rules live in
order_lifecycle; this module declares the validation and runs the rules in Spark state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pipelines.order_lifecycle import STATUSES, Event, OrderState, apply_events
from pipelines.spec import Field, Kind, Pipeline, Rule

DEFAULT_TERMINAL_TTL_MS = 60 * 60 * 1000
"""How long (processing time) an ended order's marker blocks late events from reviving it."""

FIELDS = (
    Field("order_id", Kind.STRING, (Rule(lambda c: sf.length(c) > 0, "empty:order_id"),)),
    Field("courier_id", Kind.STRING),
    Field("status", Kind.STRING, (Rule(lambda c: c.isin(*STATUSES), "unknown_status"),)),
    Field("lat", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 90, "lat_out_of_range"),)),
    Field("lon", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 180, "lon_out_of_range"),)),
    Field("event_time", Kind.TIMESTAMP),
)

_STATE_SCHEMA = (
    "courier_id string, status string, lat double, lon double, first_seen long, "
    "last_seen long, updates long, terminal boolean, expires_at long"
)
_OUTPUT_COLUMNS = [
    "order_id", "courier_id", "status", "lat", "lon", "updates", "first_seen", "last_seen",
    "deleted",
]  # fmt: skip
_OUTPUT_SCHEMA = (
    "order_id string, courier_id string, status string, lat double, lon double, "
    "updates long, first_seen long, last_seen long, deleted boolean"
)

GroupFunction = Callable[[tuple[str], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]


def orders_pipeline(terminal_ttl_ms: int = DEFAULT_TERMINAL_TTL_MS) -> Pipeline:
    return Pipeline(
        name="orders",
        fields=FIELDS,
        transform=lambda clean: transform(clean, terminal_ttl_ms),
        source_topic="orders.raw",
        target_topic="orders.current",
        dead_letter_topic="orders.deadletter",
    )


def transform(clean: DataFrame, terminal_ttl_ms: int = DEFAULT_TERMINAL_TTL_MS) -> DataFrame:
    """Clean order events (streaming) -> (key, value struct or null for a tombstone)."""
    events = clean.select(
        "order_id", "courier_id", "status", "lat", "lon",
        sf.unix_millis("event_time").alias("event_ms"),
    )  # fmt: skip
    latest = events.groupBy("order_id").applyInPandasWithState(
        order_updates(terminal_ttl_ms),
        _OUTPUT_SCHEMA,
        _STATE_SCHEMA,
        "append",
        GroupStateTimeout.ProcessingTimeTimeout,
    )
    value = sf.struct(
        "order_id",
        "courier_id",
        "status",
        sf.struct("lat", "lon").alias("location"),
        "updates",
        _iso_utc("first_seen").alias("first_seen"),
        _iso_utc("last_seen").alias("last_seen"),
    )
    return latest.select(
        sf.col("order_id").alias("key"), sf.when(~sf.col("deleted"), value).alias("value")
    )


def _iso_utc(millis_column: str) -> Column:
    # The session time zone is UTC (pipelines.session), so the literal Z is true.
    return sf.date_format(sf.timestamp_millis(millis_column), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")


def order_updates(terminal_ttl_ms: int) -> GroupFunction:
    """The per-order state function handed to applyInPandasWithState."""

    def update(
        key: tuple[str], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        if state.hasTimedOut:  # the terminal marker's time is up: forget the order
            state.remove()
            return
        now = state.getCurrentProcessingTimeMs()
        previous, expires_at = _load(state, now)
        current = apply_events(previous, _events(batches))
        if current is None or current == previous:
            if previous is not None and previous.terminal:
                # Spark clears a group's timeout whenever it is called: set it again.
                state.setTimeoutDuration(max(expires_at - now, 1))
            return
        if current.terminal:
            state.update(_state_row(current, now + terminal_ttl_ms))
            state.setTimeoutDuration(terminal_ttl_ms)
            if previous is not None:  # it was published, so it must be deleted
                yield _output(key[0], current, deleted=True)
        else:
            state.update(_state_row(current, None))
            yield _output(key[0], current, deleted=False)

    return update


def _load(state: GroupState, now: int) -> tuple[OrderState | None, int]:
    if not state.exists:
        return None, 0
    *order, expires_at = state.get
    if expires_at is not None and expires_at <= now:
        # Expired but not yet timed out (timeouts fire only in batches with data).
        state.remove()
        return None, 0
    return OrderState(*order), expires_at or 0


def _events(batches: Iterator[pd.DataFrame]) -> Iterator[Event]:
    for frame in batches:
        columns = zip(
            frame.courier_id, frame.status, frame.lat, frame.lon, frame.event_ms, strict=True
        )
        for courier_id, status, lat, lon, event_ms in columns:
            yield Event(courier_id, status, float(lat), float(lon), int(event_ms))


def _state_row(order: OrderState, expires_at: int | None) -> tuple[object, ...]:
    return (
        order.courier_id, order.status, order.lat, order.lon, order.first_seen,
        order.last_seen, order.updates, order.terminal, expires_at,
    )  # fmt: skip


def _output(order_id: str, order: OrderState, deleted: bool) -> pd.DataFrame:
    row = [
        order_id, order.courier_id, order.status, order.lat, order.lon, order.updates,
        order.first_seen, order.last_seen, deleted,
    ]  # fmt: skip
    return pd.DataFrame([row], columns=_OUTPUT_COLUMNS)


ORDERS = orders_pipeline()
