"""The orders pipeline: raw courier events -> one current value per active order.

Output value: {order_id, courier_id, status, location: {lat, lon}, updates, first_seen,
last_seen}; a DELIVERED or CANCELLED order becomes a tombstone. The rules live in
rules.py; this module declares the validation and runs the rules in Spark state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pipelines.orders.rules import (
    DEFAULT_RETENTION_MS,
    EVENT_DTYPES,
    MARKER_DTYPES,
    STATUSES,
    BucketState,
    fold,
)
from pipelines.pandas_state import (
    arrow_schema,
    from_arrow,
    horizon_ms,
    iso_utc,
    one_frame,
    to_arrow,
)
from pipelines.spec import Field, Kind, Pipeline, Rule

DEFAULT_FUTURE_SKEW_MS = 3600 * 1000
"""Events whose event_time is further ahead of the wall clock are dead-lettered."""

STATE_BUCKETS = 8
"""Orders are kept in this many state rows (buckets of order ids by hash).

Spark calls the state function once per group and micro-batch at a fixed cost (one group
per order made that the whole run time; in a small stream-mode batch each bucket call costs
tens of milliseconds, so 8 beat 64, see docs/benchmarks.md). Fixed by the checkpoint:
changing it needs a new checkpoint (and output topic), like spark.sql.shuffle.partitions.
"""


def fields(future_skew_ms: int = DEFAULT_FUTURE_SKEW_MS) -> tuple[Field, ...]:
    # current_timestamp() is the micro-batch's start: one instant for all its records.
    not_future = Rule(
        lambda c: sf.unix_millis(c) <= sf.unix_millis(sf.current_timestamp()) + future_skew_ms,
        "future_timestamp",
    )
    return (
        Field("order_id", Kind.STRING, (Rule(lambda c: sf.length(c) > 0, "empty:order_id"),)),
        Field("courier_id", Kind.STRING),
        Field("status", Kind.STRING, (Rule(lambda c: c.isin(*STATUSES), "unknown_status"),)),
        Field("lat", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 90, "lat_out_of_range"),)),
        Field("lon", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 180, "lon_out_of_range"),)),
        Field("event_time", Kind.TIMESTAMP, (not_future,)),
    )


FIELDS = fields()

_STATE_SCHEMA = "events binary, markers binary"  # each an Arrow IPC stream
_OUTPUT_SCHEMA = (
    "order_id string, courier_id string, status string, lat double, lon double, "
    "updates long, first_seen long, last_seen long, deleted boolean"
)


def orders_pipeline(
    retention_ms: int = DEFAULT_RETENTION_MS, future_skew_ms: int = DEFAULT_FUTURE_SKEW_MS
) -> Pipeline:
    return raw_orders_pipeline("orders", transform, retention_ms, future_skew_ms)


def raw_orders_pipeline(
    name: str,
    transform: Callable[[DataFrame, int], DataFrame],
    retention_ms: int,
    future_skew_ms: int,
) -> Pipeline:
    """Pipeline `name` over the raw order events: their validation, its own topics."""
    return Pipeline(
        name=name,
        fields=fields(future_skew_ms),
        transform=lambda clean: transform(clean, retention_ms),
        source_topic="orders.raw",
        target_topic=f"{name}.current",
        dead_letter_topic=f"{name}.deadletter",
    )


def transform(clean: DataFrame, retention_ms: int = DEFAULT_RETENTION_MS) -> DataFrame:
    """Clean order events (streaming) -> (key, value struct or null for a tombstone)."""
    bucket = sf.pmod(sf.xxhash64("order_id"), sf.lit(STATE_BUCKETS))
    changed = fold_in_state(
        clean, bucket, retention_ms, bucket_updates, _OUTPUT_SCHEMA, _STATE_SCHEMA
    )
    value = sf.struct(
        "order_id",
        "courier_id",
        "status",
        sf.struct("lat", "lon").alias("location"),
        "updates",
        iso_utc("first_seen").alias("first_seen"),
        iso_utc("last_seen").alias("last_seen"),
    )
    return changed.select(
        sf.col("order_id").alias("key"), sf.when(~sf.col("deleted"), value).alias("value")
    )


StateFunction = Callable[[tuple[int], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]


def fold_in_state(
    clean: DataFrame,
    group: Column,
    retention_ms: int,
    function: StateFunction,
    output_schema: str,
    state_schema: str,
) -> DataFrame:
    """Clean order events, as the rules take them (EVENT_COLUMNS), through `function` with
    one state row per `group`; out come the rows it yields (`output_schema`).

    The watermark (newest event time seen - retention) is the rules' horizon: Spark drops
    events older than it before the state function, which drops markers older than it.
    """
    events = clean.withWatermark("event_time", f"{retention_ms} milliseconds").select(
        "event_time", group.alias("group"), "order_id", "courier_id", "status", "lat", "lon",
        sf.unix_millis("event_time").alias("event_ms"),
    )  # fmt: skip
    return events.groupBy("group").applyInPandasWithState(
        function, output_schema, state_schema, "append", GroupStateTimeout.NoTimeout
    )


def bucket_updates(
    key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """The state function handed to applyInPandasWithState: one call per bucket and batch."""
    bucket, changed = fold(load_bucket(state), one_frame(batches), horizon_ms(state))
    state.update(encode_bucket(bucket))
    if len(changed):
        yield changed


def load_bucket(state: GroupState) -> BucketState:
    return decode_bucket(*state.get) if state.exists else BucketState.empty()


def decode_bucket(events: bytes, markers: bytes) -> BucketState:
    """A bucket's state row -> its state."""
    return BucketState(from_arrow(events), from_arrow(markers))


def encode_bucket(bucket: BucketState) -> tuple[bytes, bytes]:
    return to_arrow(bucket.events, _ARROW_EVENTS), to_arrow(bucket.markers, _ARROW_MARKERS)


_ARROW_EVENTS = arrow_schema(EVENT_DTYPES)
_ARROW_MARKERS = arrow_schema(MARKER_DTYPES)


ORDERS = orders_pipeline()
