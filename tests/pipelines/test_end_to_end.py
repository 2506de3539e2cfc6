"""Raw topic -> orders pipeline -> compacted topic, on real Kafka and real Spark.

The expected active orders are recomputed here in plain Python from the raw events, per
run (each batch run is one micro-batch), without using the pipeline's code.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from globalstore.codec import VALUE_FORMAT_HEADER, VALUE_FORMAT_VERSION
from globalstore.follow.topic import end_offsets
from pipelines import skeleton
from pipelines.orders.generator import RawRecord, StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from pipelines.records import DLQ_OFFSET_HEADER, DLQ_PARTITION_HEADER, DLQ_REASON_HEADER
from tests.pipelines.kafka_read import compacted, read_topic, restored_store
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def delivered(order: dict[str, Any]) -> RawRecord:
    event = {
        "order_id": order["order_id"],
        "courier_id": order["courier_id"],
        "status": "DELIVERED",
        **order["location"],
        "event_time": "2026-06-01T00:00:00.000Z",
    }
    return RawRecord(order["order_id"].encode(), orjson.dumps(event))  # fmt: skip


def decoded(content: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    return {key: orjson.loads(value) for key, value in content.items()}


@pytest.fixture
def options(make_topic: Callable[..., str], kafka_bootstrap: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    return skeleton.RunOptions(
        bootstrap_servers=kafka_bootstrap,
        source_topic=make_topic(partitions=2, compact=False, prefix="orders-raw"),
        target_topic=f"orders-current-{uuid.uuid4().hex[:10]}",  # created by the job
        dead_letter_topic=f"orders-dlq-{uuid.uuid4().hex[:10]}",
        checkpoint_dir=tmp_path / "checkpoint",
    )


def test_batch_runs_produce_the_compacted_active_orders(
    spark: SparkSession, options: skeleton.RunOptions, tmp_path: Path
) -> None:
    shape = StreamShape(orders=150, bad_every=40)
    first = generate(shape, seed=1)
    produce(options.bootstrap_servers, options.source_topic, first)
    expected = ExpectedOrders()
    expected.run(first)

    running = skeleton.start(spark, ORDERS, options)
    summary = running.wait()
    # Output and dead letters share one read and validation of the source (ReusedExchange).
    assert sum(p.numInputRows for p in running.query.recentProgress) == len(first)

    target = read_topic(options.bootstrap_servers, options.target_topic)
    assert decoded(compacted(target)) == expected.active()
    assert all(r.headers[VALUE_FORMAT_HEADER] == str(VALUE_FORMAT_VERSION).encode() for r in target)
    bad = [r for r in first if r.bad_reason is not None]
    dlq = read_topic(options.bootstrap_servers, options.dead_letter_topic)
    assert sorted((r.value, r.headers[DLQ_REASON_HEADER].decode()) for r in dlq) == sorted(
        (r.value, r.bad_reason) for r in bad
    )
    assert all(DLQ_PARTITION_HEADER in r.headers and DLQ_OFFSET_HEADER in r.headers for r in dlq)
    assert (summary.dead_lettered, summary.clean) == (len(bad), len(first) - len(bad))

    # More events: new orders and the end of some old ones. Only those keys are written.
    marks = end_offsets(options.bootstrap_servers, options.target_topic)
    ending = sorted(expected.active())[:5]
    second = generate(StreamShape(orders=20, bad_every=0), seed=2, first_order=1000)
    second += [delivered(expected.active()[order_id]) for order_id in ending]
    produce(options.bootstrap_servers, options.source_topic, second)
    before = expected.active()
    expected.run(second)
    skeleton.run(spark, ORDERS, options)

    after = expected.active()
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    new_records = read_topic(options.bootstrap_servers, options.target_topic, after=marks)
    assert {(r.key or b"").decode() for r in new_records} == changed
    assert {(r.key or b"").decode() for r in new_records if r.value is None} == set(ending)
    everything = read_topic(options.bootstrap_servers, options.target_topic)
    assert decoded(compacted(everything)) == after
    assert restored_store(options.bootstrap_servers, options.target_topic, tmp_path) == after


def test_stream_mode_picks_up_new_events_while_running(
    spark: SparkSession, options: skeleton.RunOptions
) -> None:
    """A running stream query writes an event produced after it started, in a later
    micro-batch, without a new run. How fast is the benchmarks' question: a loaded machine
    may take far longer than the 1 s trigger, so the deadline is only a safety net."""
    produce(options.bootstrap_servers, options.source_topic, generate(StreamShape(orders=5), 3))
    running = skeleton.start(
        spark, ORDERS, options.__class__(**{**vars(options), "mode": "stream"})
    )
    try:
        progress = lambda: (running.summary.describe(), running.query.status)  # noqa: E731
        eventually(lambda: running.summary.batches > 0, 120, progress)
        warmed_up = running.summary.batches
        assert "o-9999999" not in _current(options)
        fresh = RawRecord(b"o-9999999", orjson.dumps({
            "order_id": "o-9999999", "courier_id": "c-1", "status": "CREATED", "lat": 1.0,
            "lon": 2.0, "event_time": "2026-01-01T00:00:00.000Z"}))  # fmt: skip
        produce(options.bootstrap_servers, options.source_topic, [fresh])
        eventually(lambda: "o-9999999" in _current(options), 120, progress)
        # The query's progress event reaches the listener a moment after the batch's output
        # reaches the topic: wait for it rather than expect it already.
        eventually(lambda: running.summary.batches > warmed_up, 60, progress)
        assert running.query.isActive
        # Ctrl-C, as a stream run from the command line ends: wait() raises, and stop()
        # returns the summary once the query's end has reached the listener.
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            running.wait(timeout_s=60)
    finally:
        stopping = time.monotonic()
        summary = running.stop()
    assert time.monotonic() - stopping < skeleton.TERMINATION_REPORT_TIMEOUT_S / 3
    assert summary.batches > warmed_up


def _current(options: skeleton.RunOptions) -> dict[str, bytes]:
    return compacted(read_topic(options.bootstrap_servers, options.target_topic))
