"""The issue's proof: the orders job's topic does not depend on micro-batch boundaries.

One generated event set (out of order, duplicates, late terminals, strays after the end,
ISO and epoch-millisecond times, broken records) goes through the real job on real Kafka
(as JSON, and once as Avro), cut into micro-batches in several random ways:
`maxOffsetsPerTrigger`, several batch runs with events produced in between, and both.
Every cut must compact to the reference model's active orders (pipelines.orders.reference,
one event at a time).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from pyspark.sql import SparkSession

from pipelines import skeleton
from pipelines.orders.avro_events import SCHEMA_TEXT, as_avro
from pipelines.orders.generator import StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from tests.pipelines.kafka_read import compacted, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SHAPE = StreamShape(orders=120, max_lag_ms=300_000, duplicates=0.15, strays=0.3, bad_every=40)
CUTS = ("max_offsets", "runs", "runs_and_max_offsets")
# The same events as Avro (pipelines/avro.py) on the cut that cuts most, where it is cheap.
CASES = [*((cut, "json") for cut in CUTS), ("runs_and_max_offsets", "avro")]


@pytest.mark.parametrize(("cut", "value_format"), CASES)
def test_every_cut_into_micro_batches_gives_the_reference_topic(
    cut: str,
    value_format: str,
    spark: SparkSession,
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    records = generate(SHAPE, seed=21)
    expected = ExpectedOrders().run(records).active()
    rng = random.Random(f"{cut}-21")
    run_id = uuid.uuid4().hex[:8]
    options = skeleton.RunOptions(
        bootstrap_servers=kafka_bootstrap,
        source_topic=make_topic(partitions=2, compact=False, prefix="property-raw"),
        target_topic=f"property-current-{run_id}",
        dead_letter_topic=f"property-dlq-{run_id}",
        checkpoint_dir=tmp_path / "checkpoint",
        max_offsets_per_trigger=None if cut == "runs" else rng.randint(40, 200),
        avro_schemas={1: SCHEMA_TEXT} if value_format == "avro" else None,
    )
    if value_format == "avro":
        records = as_avro(records, schema_id=1)
    chunks = 1 if cut == "max_offsets" else rng.randint(3, 4)
    cuts = sorted(rng.sample(range(1, len(records)), chunks - 1))
    batches = 0
    for start, end in zip([0, *cuts], [*cuts, len(records)], strict=True):
        produce(kafka_bootstrap, options.source_topic, records[start:end])
        batches += skeleton.run(spark, ORDERS, options).batches

    content = compacted(read_topic(kafka_bootstrap, options.target_topic))
    assert {key: orjson.loads(value) for key, value in content.items()} == expected
    assert batches >= 3  # the input really was cut into several micro-batches
