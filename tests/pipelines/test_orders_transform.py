"""The orders transform as a DataFrame function, on hand-written micro-batches.

applyInPandasWithState needs a streaming input, so each micro-batch is one JSON file added
to a file stream and processed by an availableNow run: the real state, across batches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from pipelines.order_events.bucket import decode_bucket
from pipelines.orders.transform import STATE_BUCKETS, transform

pytestmark = pytest.mark.spark

EVENT_SCHEMA = (
    "order_id string, courier_id string, status string, lat double, lon double, "
    "event_time timestamp"
)


def ev(order: str, status: str, second: int, lat: float = 1.0) -> dict[str, Any]:
    return {"order_id": order, "courier_id": "c-9", "status": status, "lat": lat, "lon": 2.0,
            "event_time": f"2026-01-01T00:00:{second:02d}.000Z"}  # fmt: skip


class Batches:
    """Run the transform over micro-batches; collect (batch_id, key, value or None) rows."""

    def __init__(self, spark: SparkSession, tmp_path: Path, retention_ms: int) -> None:
        self.spark, self.inbox, self.retention = spark, tmp_path / "inbox", retention_ms
        self.checkpoint = tmp_path / "checkpoint"
        self.inbox.mkdir()
        self.written = 0
        self.output: list[tuple[int, str, dict[str, Any] | None]] = []
        self.state_orders: list[int] = []

    def run(self, *batches: list[dict[str, Any]]) -> list[tuple[int, str, dict[str, Any] | None]]:
        before = len(self.output)
        for batch in batches:
            # One file per run: files of equal mtime have no defined order in one run.
            (self.inbox / f"{self.written:04d}.json").write_text("\n".join(map(json.dumps, batch)))
            self.written += 1
            self._run_once()
        return self.output[before:]

    def _run_once(self) -> None:
        stream = self.spark.readStream.schema(EVENT_SCHEMA).json(str(self.inbox))
        query = (
            transform(stream, self.retention)
            .selectExpr("key", "to_json(value) AS value")
            .writeStream.foreachBatch(self._collect)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        # Orders are kept in bucket rows: count the orders (active or ended) inside them.
        rows = self.spark.read.format("statestore").load(str(self.checkpoint)).collect()
        buckets = [decode_bucket(*row.value.groupState) for row in rows]
        self.state_orders.append(sum(b.events.order_id.nunique() + len(b.markers) for b in buckets))

    def _collect(self, frame: DataFrame, batch_id: int) -> None:
        for row in frame.collect():
            value = json.loads(row.value) if row.value is not None else None
            self.output.append((batch_id, row.key, value))


@pytest.fixture
def batches(spark: SparkSession, tmp_path: Path) -> Batches:
    return Batches(spark, tmp_path, retention_ms=7 * 24 * 3600 * 1000)


def value(status: str, lat: float, updates: int, first: int, last: int) -> dict[str, Any]:
    return {"order_id": "a", "courier_id": "c-9", "status": status,
            "location": {"lat": lat, "lon": 2.0}, "updates": updates,
            "first_seen": f"2026-01-01T00:00:{first:02d}.000Z",
            "last_seen": f"2026-01-01T00:00:{last:02d}.000Z"}  # fmt: skip


def test_latest_event_wins_duplicates_change_nothing_late_events_count(batches: Batches) -> None:
    out = batches.run(
        [ev("a", "PICKED_UP", 20), ev("a", "CREATED", 10), ev("a", "CREATED", 10)],
        [ev("a", "CREATED", 10), ev("a", "IN_TRANSIT", 15, lat=7.0)],  # duplicate + late
        [ev("a", "CREATED", 10)],  # only a duplicate: nothing written
        [ev("a", "IN_TRANSIT", 30, lat=5.0), ev("a", "CREATED", 5)],
    )
    assert out == [
        (0, "a", value("PICKED_UP", 1.0, updates=2, first=10, last=20)),
        (1, "a", value("PICKED_UP", 1.0, updates=3, first=10, last=20)),
        (3, "a", value("IN_TRANSIT", 5.0, updates=5, first=5, last=30)),
    ]


def test_terminals_tombstone_whenever_they_arrive_and_nothing_resurrects(
    batches: Batches,
) -> None:
    out = batches.run(
        [ev("a", "CREATED", 10), ev("b", "CREATED", 10), ev("d", "IN_TRANSIT", 30)],
        [ev("a", "DELIVERED", 40), ev("b", "CANCELLED", 11), ev("c", "CREATED", 5)],
        [ev("a", "IN_TRANSIT", 30), ev("b", "IN_TRANSIT", 50), ev("d", "DELIVERED", 20)],
        [ev("d", "IN_TRANSIT", 59)],
    )
    assert sorted((batch, key, value is None) for batch, key, value in out if batch > 0) == [
        (1, "a", True), (1, "b", True), (1, "c", False), (2, "d", True)
    ]  # fmt: skip


def test_order_that_starts_and_ends_in_one_batch_is_never_published(batches: Batches) -> None:
    assert batches.run([ev("a", "CREATED", 10), ev("a", "DELIVERED", 20)]) == []


def same_bucket(spark: SparkSession) -> tuple[str, str]:
    """Two order ids that share a state bucket (a bucket drops markers when it has data)."""
    ids = spark.createDataFrame([(f"o{i}",) for i in range(40)], "id string")
    bucket = sf.pmod(sf.xxhash64("id"), sf.lit(STATE_BUCKETS))
    rows = ids.select("id", bucket.alias("bucket")).collect()
    first = rows[0]
    return first.id, next(r.id for r in rows[1:] if r.bucket == first.bucket)


def test_ended_marker_is_dropped_after_its_event_time_retention(
    spark: SparkSession, tmp_path: Path
) -> None:
    a, c = same_bucket(spark)
    batches = Batches(spark, tmp_path, retention_ms=5_000)
    out = batches.run(
        [ev(a, "CREATED", 10), ev(c, "CREATED", 10)],
        [ev(a, "DELIVERED", 20)],
        [ev(c, "IN_TRANSIT", 24)],  # watermark 19 s: a's marker (20 s) is kept
        [ev(a, "IN_TRANSIT", 21), ev(c, "IN_TRANSIT", 40)],  # ignored: a ended
        [ev(c, "IN_TRANSIT", 41)],  # watermark 35 s: the marker is dropped
        [ev(a, "IN_TRANSIT", 18)],  # too late (older than the watermark): ignored
    )
    # a: active -> marker -> gone; c stays: the state does not grow with ended orders.
    assert batches.state_orders == [2, 2, 2, 2, 1, 1]
    assert [(batch, key) for batch, key, _ in out if key == a] == [(0, a), (1, a)]
