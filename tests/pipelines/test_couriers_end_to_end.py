"""Raw topic -> couriers pipeline -> compacted topic, on real Kafka and real Spark.

The same generated raw order stream as the orders pipeline's, with few couriers so that
each carries many orders, produced in two parts with a batch run after each and the runs
cut into several micro-batches. The compacted topic, and a GlobalStore restored from it,
must hold exactly the reference model's figures (pipelines.couriers.reference).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from pyspark.sql import SparkSession

from pipelines import skeleton
from pipelines.couriers.reference import ExpectedCouriers
from pipelines.couriers.transform import COURIERS
from pipelines.orders.generator import StreamShape, generate, produce
from tests.pipelines.kafka_read import compacted, read_topic, restored_store

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SHAPE = StreamShape(orders=150, couriers=8, strays=0.3, bad_every=40)


def test_batch_runs_produce_the_reference_courier_figures(
    spark: SparkSession, kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    run_id = uuid.uuid4().hex[:10]
    options = skeleton.RunOptions(
        bootstrap_servers=kafka_bootstrap,
        source_topic=make_topic(partitions=2, compact=False, prefix="couriers-raw"),
        target_topic=f"couriers-current-{run_id}",  # created by the job
        dead_letter_topic=f"couriers-dlq-{run_id}",
        checkpoint_dir=tmp_path / "checkpoint",
        max_offsets_per_trigger=300,
    )
    records = generate(SHAPE, seed=5)
    half = len(records) // 2
    expected = ExpectedCouriers()
    summaries = []
    for part in (records[:half], records[half:]):
        produce(kafka_bootstrap, options.source_topic, part)
        expected.run(part)
        summaries.append(skeleton.run(spark, COURIERS, options))
        content = compacted(read_topic(kafka_bootstrap, options.target_topic))
        assert {key: orjson.loads(value) for key, value in content.items()} == expected.figures()

    figures = expected.figures().values()
    assert len(figures) == SHAPE.couriers
    assert sum(f["active_orders"] for f in figures) > 0 and sum(f["delivered"] for f in figures) > 0
    assert sum(s.batches for s in summaries) >= 3
    assert sum(s.dead_lettered for s in summaries) == sum(r.bad_reason is not None for r in records)
    store = restored_store(kafka_bootstrap, options.target_topic, tmp_path)
    assert store == expected.figures()
