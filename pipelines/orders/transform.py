"""The orders pipeline: raw courier events -> one current value per active order.

Output value: {order_id, courier_id, status, location: {lat, lon}, updates, first_seen,
last_seen}; a DELIVERED or CANCELLED order becomes a tombstone. The rules live in
order_events/lifecycle.py, the validation in order_events/raw.py; this module runs them
in Spark state, in buckets of orders.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState

from pipelines.order_events.bucket import fold_stored
from pipelines.order_events.lifecycle import DEFAULT_RETENTION_MS
from pipelines.order_events.raw import (
    DEFAULT_FUTURE_SKEW_MS,
    fields,
    fold_in_state,
    raw_orders_pipeline,
)
from pipelines.pandas_state import horizon_ms, iso_utc, one_frame
from pipelines.spec import Pipeline

STATE_BUCKETS = 8
"""Orders are kept in this many state rows (buckets of order ids by hash).

Spark calls the state function once per group and micro-batch at a fixed cost (one group
per order made that the whole run time; in a small stream-mode batch each bucket call costs
tens of milliseconds, so 8 beat 64, see benchmarks/results/history.md, "Pipeline"). Fixed by
the checkpoint: changing it needs a new checkpoint (and output topic), like
spark.sql.shuffle.partitions.
"""

FIELDS = fields()

_STATE_SCHEMA = "events binary, markers binary"  # each an Arrow IPC stream
_OUTPUT_SCHEMA = (
    "order_id string, courier_id string, status string, lat double, lon double, "
    "updates long, first_seen long, last_seen long, deleted boolean"
)


def orders_pipeline(
    retention_ms: int = DEFAULT_RETENTION_MS, future_skew_ms: int = DEFAULT_FUTURE_SKEW_MS
) -> Pipeline:
    """The orders job: one current value per active order from the raw events."""
    return raw_orders_pipeline("orders", transform, retention_ms, future_skew_ms)


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


def bucket_updates(
    key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """The state function handed to applyInPandasWithState: one call per bucket and batch."""
    stored = state.get if state.exists else None
    blobs, changed = fold_stored(stored, one_frame(batches), horizon_ms(state))
    state.update(blobs)
    if len(changed):
        yield changed


ORDERS = orders_pipeline()
