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

from pipelines.orders.transform import decode_bucket, transform

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

    def __init__(self, spark: SparkSession, tmp_path: Path, terminal_ttl_ms: int) -> None:
        self.spark, self.inbox, self.ttl = spark, tmp_path / "inbox", terminal_ttl_ms
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
            transform(stream, self.ttl)
            .selectExpr("key", "to_json(value) AS value")
            .writeStream.foreachBatch(self._collect)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        # Orders are kept in bucket rows: count the orders inside them.
        buckets = self.spark.read.format("statestore").load(str(self.checkpoint)).collect()
        self.state_orders.append(
            sum(len(decode_bucket(row.value.groupState.orders)) for row in buckets)
        )

    def _collect(self, frame: DataFrame, batch_id: int) -> None:
        for row in frame.collect():
            value = json.loads(row.value) if row.value is not None else None
            self.output.append((batch_id, row.key, value))


@pytest.fixture
def batches(spark: SparkSession, tmp_path: Path) -> Batches:
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    return Batches(spark, tmp_path, terminal_ttl_ms=60_000)


def test_latest_event_wins_and_late_duplicate_events_change_nothing(batches: Batches) -> None:
    out = batches.run(
        [ev("a", "PICKED_UP", 20), ev("a", "CREATED", 10), ev("a", "CREATED", 10)],
        [ev("a", "CREATED", 10), ev("a", "IN_TRANSIT", 15, lat=7.0)],  # duplicate + late
        [ev("a", "IN_TRANSIT", 30, lat=5.0)],
    )
    assert out == [
        (0, "a", {"order_id": "a", "courier_id": "c-9", "status": "PICKED_UP",
                  "location": {"lat": 1.0, "lon": 2.0}, "updates": 2,
                  "first_seen": "2026-01-01T00:00:10.000Z",
                  "last_seen": "2026-01-01T00:00:20.000Z"}),
        (2, "a", {"order_id": "a", "courier_id": "c-9", "status": "IN_TRANSIT",
                  "location": {"lat": 5.0, "lon": 2.0}, "updates": 3,
                  "first_seen": "2026-01-01T00:00:10.000Z",
                  "last_seen": "2026-01-01T00:00:30.000Z"}),
    ]  # fmt: skip


def test_delivery_tombstones_and_late_events_do_not_resurrect(batches: Batches) -> None:
    out = batches.run(
        [ev("a", "CREATED", 10), ev("b", "CREATED", 10)],
        [ev("a", "DELIVERED", 40), ev("b", "CANCELLED", 11), ev("c", "CREATED", 5)],
        [ev("a", "IN_TRANSIT", 30), ev("b", "IN_TRANSIT", 50)],
    )
    assert sorted((batch, key, value is None) for batch, key, value in out if batch > 0) == [
        (1, "a", True), (1, "b", True), (1, "c", False)
    ]  # fmt: skip


def test_order_that_starts_and_ends_in_one_batch_is_never_published(batches: Batches) -> None:
    assert batches.run([ev("a", "CREATED", 10), ev("a", "DELIVERED", 20)]) == []


def test_terminal_marker_is_released_after_its_ttl(spark: SparkSession, tmp_path: Path) -> None:
    batches = Batches(spark, tmp_path, terminal_ttl_ms=1)
    batches.run([ev("a", "CREATED", 10), ev("b", "CREATED", 10)])
    batches.run([ev("a", "DELIVERED", 20)])
    batches.run([ev("b", "IN_TRANSIT", 30)])  # any batch with data fires due timeouts
    # a: active -> marker -> gone; b stays: state went 2 -> 2 -> 1 orders, not growing.
    assert batches.state_orders == [2, 2, 1]
