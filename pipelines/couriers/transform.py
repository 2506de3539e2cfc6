"""The couriers pipeline: raw order events -> current figures per courier.

Output value: {courier_id, active_orders, delivered, cancelled, position: {lat, lon},
last_seen}, written whenever one of them changes; couriers are never deleted. Same raw
topic and validation as the orders pipeline, its own output and dead-letter topics. The
rules live in rules.py; this module runs them in Spark state.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState

from pipelines.couriers.rules import COURIER_DTYPES, CourierState, fold
from pipelines.order_events.bucket import decode_bucket, encode_bucket
from pipelines.order_events.lifecycle import DEFAULT_RETENTION_MS
from pipelines.order_events.raw import DEFAULT_FUTURE_SKEW_MS, fold_in_state, raw_orders_pipeline
from pipelines.pandas_state import (
    arrow_schema,
    from_arrow,
    horizon_ms,
    iso_utc,
    one_frame,
    to_arrow,
)
from pipelines.spec import Pipeline

_STATE_SCHEMA = "events binary, markers binary, couriers binary"  # each an Arrow IPC stream
_OUTPUT_SCHEMA = (
    "courier_id string, active long, delivered long, cancelled long, seen_ms long, "
    "seen_rank long, lat double, lon double"
)


def couriers_pipeline(
    retention_ms: int = DEFAULT_RETENTION_MS, future_skew_ms: int = DEFAULT_FUTURE_SKEW_MS
) -> Pipeline:
    """The couriers job: figures per courier from the raw order events."""
    return raw_orders_pipeline("couriers", transform, retention_ms, future_skew_ms)


def transform(clean: DataFrame, retention_ms: int = DEFAULT_RETENTION_MS) -> DataFrame:
    """Clean order events (streaming) -> (courier id, figures struct)."""
    # One group: a courier's figures need every order (an order may change courier), and
    # Spark 4.2 refuses a second applyInPandasWithState in a query, so the orders cannot
    # be folded per bucket first and summed per courier after.
    changed = fold_in_state(
        clean, sf.lit(0), retention_ms, courier_updates, _OUTPUT_SCHEMA, _STATE_SCHEMA
    )
    value = sf.struct(
        "courier_id",
        sf.col("active").alias("active_orders"),
        "delivered",
        "cancelled",
        sf.struct("lat", "lon").alias("position"),
        iso_utc("seen_ms").alias("last_seen"),
    )
    return changed.select(sf.col("courier_id").alias("key"), value.alias("value"))


def courier_updates(
    key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """The state function handed to applyInPandasWithState: one call per batch."""
    folded, changed = fold(load_state(state), one_frame(batches), horizon_ms(state))
    state.update(encode_state(folded))
    if len(changed):
        yield changed


def load_state(state: GroupState) -> CourierState:
    """The group's state as Spark kept it, or an empty one."""
    if not state.exists:
        return CourierState.empty()
    events, markers, couriers = state.get
    return CourierState(decode_bucket(events, markers), from_arrow(couriers))


def encode_state(folded: CourierState) -> tuple[bytes, bytes, bytes]:
    """The state as the Arrow blobs Spark keeps."""
    return (*encode_bucket(folded.orders), to_arrow(folded.couriers, _ARROW_COURIERS))


_ARROW_COURIERS = arrow_schema(COURIER_DTYPES)

COURIERS = couriers_pipeline()
