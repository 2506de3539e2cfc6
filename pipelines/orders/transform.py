"""The orders pipeline: raw courier events -> one current value per active order.

Output value: {order_id, courier_id, status, location: {lat, lon}, updates, first_seen,
last_seen}; a DELIVERED or CANCELLED order becomes a tombstone. The rules live in
rules.py; this module declares the validation and runs the rules in Spark state.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pipelines.orders.rules import (
    DEFAULT_RETENTION_MS,
    EVENT_DTYPES,
    MARKER_DTYPES,
    NO_HORIZON,
    STATUSES,
    BucketState,
    fold,
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
    return Pipeline(
        name="orders",
        fields=fields(future_skew_ms),
        transform=lambda clean: transform(clean, retention_ms),
        source_topic="orders.raw",
        target_topic="orders.current",
        dead_letter_topic="orders.deadletter",
    )


def transform(clean: DataFrame, retention_ms: int = DEFAULT_RETENTION_MS) -> DataFrame:
    """Clean order events (streaming) -> (key, value struct or null for a tombstone)."""
    # The watermark (newest event time seen - retention) is the rules' horizon: Spark drops
    # events older than it before the state function, which drops markers older than it.
    events = clean.withWatermark("event_time", f"{retention_ms} milliseconds").select(
        "event_time",
        sf.pmod(sf.xxhash64("order_id"), sf.lit(STATE_BUCKETS)).alias("bucket"),
        "order_id", "courier_id", "status", "lat", "lon",
        sf.unix_millis("event_time").alias("event_ms"),
    )  # fmt: skip
    changed = events.groupBy("bucket").applyInPandasWithState(
        bucket_updates,
        _OUTPUT_SCHEMA,
        _STATE_SCHEMA,
        "append",
        GroupStateTimeout.NoTimeout,
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


def bucket_updates(
    key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """The state function handed to applyInPandasWithState: one call per bucket and batch."""
    frames = list(batches)
    events = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    horizon = max(state.getCurrentWatermarkMs(), NO_HORIZON)
    bucket, changed = fold(load_bucket(state), events, horizon)
    state.update(encode_bucket(bucket))
    if len(changed):
        yield changed


def load_bucket(state: GroupState) -> BucketState:
    return decode_bucket(*state.get) if state.exists else BucketState.empty()


def decode_bucket(events: bytes, markers: bytes) -> BucketState:
    """A bucket's state row -> its state."""
    return BucketState(_from_arrow(events), _from_arrow(markers))


def encode_bucket(bucket: BucketState) -> tuple[bytes, bytes]:
    return _to_arrow(bucket.events, _ARROW_EVENTS), _to_arrow(bucket.markers, _ARROW_MARKERS)


def _arrow_schema(dtypes: dict[str, str]) -> pa.Schema:
    return pa.schema(
        [(c, pa.string() if d == "str" else pa.from_numpy_dtype(d)) for c, d in dtypes.items()]
    )


_ARROW_EVENTS = _arrow_schema(EVENT_DTYPES)
_ARROW_MARKERS = _arrow_schema(MARKER_DTYPES)


def _from_arrow(blob: bytes) -> pd.DataFrame:
    return pa.ipc.open_stream(blob).read_all().to_pandas()


def _to_arrow(frame: pd.DataFrame, schema: pa.Schema) -> bytes:
    columns = [frame[name].to_numpy() for name in schema.names]
    batch = pa.record_batch(columns, schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())  # pyarrow is untyped


ORDERS = orders_pipeline()
