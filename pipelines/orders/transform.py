"""The orders pipeline: raw courier events -> one current value per active order.

Output value: {order_id, courier_id, status, location: {lat, lon}, updates, first_seen,
last_seen}; a DELIVERED or CANCELLED order becomes a tombstone. The rules live in
rules.py; this module declares the validation and runs the rules in Spark state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pipelines.orders.rules import (
    STATE_DTYPES,
    STATUSES,
    empty_state,
    expire,
    fold,
)
from pipelines.spec import Field, Kind, Pipeline, Rule

DEFAULT_TERMINAL_TTL_MS = 60 * 60 * 1000
"""How long (processing time) an ended order's marker blocks late events from reviving it."""

STATE_BUCKETS = 8
"""Orders are kept in this many state rows (buckets of order ids by hash).

Spark calls the state function once per group and micro-batch at a fixed cost (one group
per order made that the whole run time; in a small stream-mode batch each bucket call costs
tens of milliseconds, so 8 beat 64, see docs/benchmarks.md). Fixed by the checkpoint:
changing it needs a new checkpoint (and output topic), like spark.sql.shuffle.partitions.
"""

FIELDS = (
    Field("order_id", Kind.STRING, (Rule(lambda c: sf.length(c) > 0, "empty:order_id"),)),
    Field("courier_id", Kind.STRING),
    Field("status", Kind.STRING, (Rule(lambda c: c.isin(*STATUSES), "unknown_status"),)),
    Field("lat", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 90, "lat_out_of_range"),)),
    Field("lon", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 180, "lon_out_of_range"),)),
    Field("event_time", Kind.TIMESTAMP),
)

_STATE_SCHEMA = "orders binary"  # the bucket's orders as one Arrow IPC stream
_ARROW_STATE = pa.schema(
    [(column, pa.string() if dtype == "str" else pa.from_numpy_dtype(dtype))
     for column, dtype in STATE_DTYPES.items()]
)  # fmt: skip
_OUTPUT_SCHEMA = (
    "order_id string, courier_id string, status string, lat double, lon double, "
    "updates long, first_seen long, last_seen long, deleted boolean"
)

GroupFunction = Callable[[tuple[int], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]


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
        sf.pmod(sf.xxhash64("order_id"), sf.lit(STATE_BUCKETS)).alias("bucket"),
        "order_id", "courier_id", "status", "lat", "lon",
        sf.unix_millis("event_time").alias("event_ms"),
    )  # fmt: skip
    changed = events.groupBy("bucket").applyInPandasWithState(
        bucket_updates(terminal_ttl_ms),
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
    return changed.select(
        sf.col("order_id").alias("key"), sf.when(~sf.col("deleted"), value).alias("value")
    )


def _iso_utc(millis_column: str) -> Column:
    # The session time zone is UTC (pipelines.session), so the literal Z is true.
    return sf.date_format(sf.timestamp_millis(millis_column), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")


def bucket_updates(terminal_ttl_ms: int) -> GroupFunction:
    """The state function handed to applyInPandasWithState: one call per bucket and batch."""

    def update(
        key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        now = state.getCurrentProcessingTimeMs()
        orders = _load(state)
        if state.hasTimedOut:  # a terminal marker's time is up: forget those orders
            _store(state, expire(orders, now), now)
            return
        frames = list(batches)
        events = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        orders, changed = fold(orders, events, now, terminal_ttl_ms)
        _store(state, orders, now)
        if len(changed):
            yield changed

    return update


def _load(state: GroupState) -> pd.DataFrame:
    return decode_bucket(state.get[0]) if state.exists else empty_state()


def decode_bucket(blob: bytes) -> pd.DataFrame:
    """A bucket's state value -> its orders (rules.STATE_DTYPES columns)."""
    return pa.ipc.open_stream(blob).read_all().to_pandas()


def _encode_bucket(orders: pd.DataFrame) -> bytes:
    batch = pa.record_batch([orders[column].to_numpy() for column in STATE_DTYPES], _ARROW_STATE)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _ARROW_STATE) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())  # pyarrow is untyped


def _store(state: GroupState, orders: pd.DataFrame, now: int) -> None:
    if orders.empty:
        state.remove()
        return
    state.update((_encode_bucket(orders),))
    markers = orders.expires_at[orders.expires_at > 0]
    if not markers.empty:
        # Spark clears a group's timeout whenever it is called: set it again.
        state.setTimeoutDuration(max(int(markers.min()) - now, 1))


ORDERS = orders_pipeline()
