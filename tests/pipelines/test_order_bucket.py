"""The job's state step (bucket.fold_stored) without Spark: folding only a batch's orders
out of the stored Arrow bucket gives what folding the whole bucket in pandas gives, batch
after batch, and its state row keeps the layout that existing checkpoints hold."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pipelines.order_events.bucket import Blobs, decode_bucket, encode_bucket, fold_stored
from pipelines.order_events.lifecycle import EVENT_COLUMNS, BucketState, fold
from pipelines.orders.generator import StreamShape, generate
from pipelines.orders.reference import ExpectedOrders
from pipelines.pandas_state import NO_HORIZON
from tests.pipelines.test_orders_rules import RETENTION, apply, events, rows, to_events

MINUTE = 60_000  # shorter than the events' lag: markers expire while orders get events

# The state row's layout since the first bucketed version: a checkpoint holds these.
EVENTS_SCHEMA = pa.schema(
    [("order_id", pa.string()), ("courier_id", pa.string()), ("status", pa.string()),
     ("lat", pa.float64()), ("lon", pa.float64()), ("event_ms", pa.int64())]
)  # fmt: skip
MARKERS_SCHEMA = pa.schema([("order_id", pa.string()), ("ended_ms", pa.int64())])
CHANGED = ("order_id", "courier_id", "status", "lat", "lon", "updates", "first_seen",
           "last_seen", "deleted")  # fmt: skip


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def batches_in(blob: bytes) -> int:
    return sum(1 for _ in pa.ipc.open_stream(blob))


@pytest.mark.parametrize("retention", [RETENTION, MINUTE])
@pytest.mark.parametrize("seed", range(8))
def test_the_stored_step_equals_the_whole_bucket_fold_batch_after_batch(
    seed: int, retention: int
) -> None:
    rng = random.Random(seed)
    records = generate(StreamShape(orders=80, max_lag_ms=300_000, duplicates=0.2), seed=seed)
    frame = to_events(records)
    cuts = sorted(rng.sample(range(1, len(frame)), rng.randint(3, 25)))
    whole, horizon = BucketState.empty(), NO_HORIZON
    stored: Blobs | None = None
    content: dict[str, object] = {}
    for start, end in zip([0, *cuts], [*cuts, len(frame)], strict=True):
        batch = frame.iloc[start:end]
        whole, expected = fold(whole, batch, horizon)
        stored, changed = fold_stored(stored, batch, horizon)
        assert rows(changed, *CHANGED) == rows(expected, *CHANGED)
        state = decode_bucket(*stored)
        assert rows(state.events, *EVENT_COLUMNS) == rows(whole.events, *EVENT_COLUMNS)
        assert rows(state.markers, "order_id", "ended_ms") == rows(
            whole.markers, "order_id", "ended_ms"
        )
        apply(content, changed)
        horizon = max(horizon, int(batch.event_ms.max()) - retention)
    if retention == RETENTION:  # a minute is shorter than the lag: cuts then matter
        assert content == ExpectedOrders(retention).run(records).active()


def test_a_marker_expires_though_its_order_gets_no_more_events() -> None:
    ended, _ = fold(BucketState.empty(), events(("a", "CREATED", 0), ("a", "DELIVERED", 10)), 0)
    blobs, _ = fold_stored(encode_bucket(ended), events(("b", "CREATED", 100)), 50)
    assert rows(decode_bucket(*blobs).markers, "order_id") == []
    kept, _ = fold_stored(encode_bucket(ended), events(("b", "CREATED", 100)), 10)
    assert rows(decode_bucket(*kept).markers, "order_id", "ended_ms") == [("a", 10)]


def test_the_state_row_keeps_the_checkpointed_layout_and_one_batch_per_blob() -> None:
    # A state row as the previous version wrote it, built here with plain pyarrow.
    old: Blobs = (
        ipc(pa.table([["a"], ["c1"], ["CREATED"], [1.0], [2.0], [10]], schema=EVENTS_SCHEMA)),
        ipc(pa.table([["z"], [5]], schema=MARKERS_SCHEMA)),
    )
    blobs: Blobs | None = old
    for i in range(5):
        assert blobs is not None
        blobs, changed = fold_stored(blobs, events((f"o{i}", "CREATED", 20 + i)), NO_HORIZON)
        assert rows(changed, "order_id") == [(f"o{i}",)]
    assert blobs is not None
    events_blob, markers_blob = blobs
    assert pa.ipc.open_stream(events_blob).schema == EVENTS_SCHEMA
    assert pa.ipc.open_stream(markers_blob).schema == MARKERS_SCHEMA
    assert [batches_in(events_blob), batches_in(markers_blob)] == [1, 1]
    state = decode_bucket(*blobs)
    assert sorted(state.events.order_id) == ["a", "o0", "o1", "o2", "o3", "o4"]
    assert rows(state.markers, "order_id", "ended_ms") == [("z", 5)]


def test_an_unknown_order_in_an_empty_bucket_needs_no_stored_row() -> None:
    blobs, changed = fold_stored(None, events(("a", "CREATED", 10)), NO_HORIZON)
    assert rows(changed, "order_id", "updates") == [("a", 1)]
    assert rows(decode_bucket(*blobs).events, "order_id", "event_ms") == [("a", 10)]
