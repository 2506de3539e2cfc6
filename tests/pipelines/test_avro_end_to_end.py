"""The same events as JSON and as Avro, on real Kafka and real Spark: the same output topic.

The Avro run's reader schema comes through the schema registry client from a real registry
(Apicurio, started once for the session: tests/apicurio.py).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pipelines import skeleton
from pipelines.cli import pipeline
from pipelines.orders.avro_events import SCHEMA_TEXT, as_avro
from pipelines.orders.generator import RawRecord, StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from pipelines.records import DLQ_REASON_HEADER
from pipelines.schema_registry import register, subject_of, subject_schemas
from tests.pipelines.kafka_read import Record, compacted, compacted_json, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def run_options(source: str, bootstrap: str, checkpoint: Path) -> skeleton.RunOptions:
    run = uuid.uuid4().hex[:8]
    return skeleton.RunOptions(
        bootstrap_servers=bootstrap,
        source_topic=source,
        target_topic=f"avro-current-{run}",
        dead_letter_topic=f"avro-dlq-{run}",
        checkpoint_dir=checkpoint,
        max_offsets_per_trigger=150,  # the same cuts in both topics: same offsets
    )


def by_key(records: list[Record]) -> dict[bytes | None, list[tuple[int, bytes | None, dict]]]:
    """Each key's records (partition, value, headers) in the order they were written."""
    found: dict[bytes | None, list[tuple[int, bytes | None, dict]]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        found[record.key].append((record.partition, record.value, record.headers))
    return dict(found)


# Four batch runs of several micro-batches: ~3 min on a machine busy with other jobs, and
# past the suite's 300 s when the load was 15 on 2 cores.
@pytest.mark.timeout(600)
def test_avro_and_json_input_write_the_same_output_topic(
    spark: SparkSession,
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    schema_registry: str,
) -> None:
    shape = StreamShape(orders=150, bad_every=40, duplicates=0.1, strays=0.3)
    runs = [generate(shape, seed=11), generate(shape, seed=12, first_order=120)]
    json_source = make_topic(partitions=2, compact=False, prefix="json-raw")
    avro_source = make_topic(partitions=2, compact=False, prefix="avro-raw")
    schema_id = register(schema_registry, subject_of(avro_source), SCHEMA_TEXT)
    schemas = subject_schemas(schema_registry, subject_of(avro_source))
    # The registry gives the schema back as it stores it (Apicurio without the spaces).
    assert {i: orjson.loads(text) for i, text in schemas.items()} == {
        schema_id: orjson.loads(SCHEMA_TEXT)
    }
    json_options = run_options(json_source, kafka_bootstrap, tmp_path / "json")
    avro_options = run_options(avro_source, kafka_bootstrap, tmp_path / "avro")
    avro_options = skeleton.RunOptions(**{**vars(avro_options), "avro_schemas": schemas})
    avro_events: list[RawRecord] = []
    for events in runs:  # two batch runs each, events produced in between
        produce(kafka_bootstrap, json_source, events)
        avro_events += as_avro(events, schema_id)
        produce(kafka_bootstrap, avro_source, avro_events[-len(events) :])
        skeleton.run(spark, ORDERS, json_options)
        assert skeleton.run(spark, ORDERS, avro_options).batches >= 2

    from_json = read_topic(kafka_bootstrap, json_options.target_topic)
    from_avro = read_topic(kafka_bootstrap, avro_options.target_topic)
    assert len(from_avro) == len(from_json) > 100
    # Record by record per key: partition, value bytes and headers, in the order written
    # (Spark's tasks interleave different keys differently from run to run).
    assert by_key(from_avro) == by_key(from_json)
    expected = ExpectedOrders()
    for events in runs:
        expected.run(events)
    assert {k: orjson.loads(v) for k, v in compacted(from_avro).items()} == expected.active()

    dead = read_topic(kafka_bootstrap, avro_options.dead_letter_topic)
    assert sorted((r.value, r.headers[DLQ_REASON_HEADER].decode()) for r in dead) == sorted(
        (r.value, r.bad_reason) for r in avro_events if r.bad_reason is not None
    )
    reasons = {r.headers[DLQ_REASON_HEADER].decode() for r in dead}
    assert {"not_avro_wire_format", f"unknown_schema_id:{schema_id + 1000}"} <= reasons
    assert {f"bad_avro_body:{schema_id}", "unknown_status", "oversize"} <= reasons


def test_generate_and_run_with_a_registry_from_the_command_line(
    spark: SparkSession,
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    schema_registry: str,
) -> None:
    source = make_topic(partitions=2, compact=False, prefix="avro-cli-raw")
    target = f"avro-cli-current-{uuid.uuid4().hex[:8]}"
    common = ["--bootstrap-servers", kafka_bootstrap]
    # Another subject first, so the orders schema's id is not the first one by chance.
    register(schema_registry, f"other-{uuid.uuid4().hex[:8]}-value", '{"type": "string"}')
    flags = [*common, "--schema-registry", schema_registry]
    generated = CliRunner().invoke(
        pipeline,
        ["generate", "orders", *flags, "--topic", source, "--orders", "60", "--format", "avro"],
    )
    assert generated.exit_code == 0, generated.output
    [schema_id] = subject_schemas(schema_registry, subject_of(source))
    assert f"Avro schema id {schema_id}" in generated.output
    ran = CliRunner().invoke(
        pipeline,
        ["run", "orders", *flags, "--source-topic", source, "--target-topic", target,
         "--checkpoint-dir", str(tmp_path / "checkpoint")],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    events = generate(StreamShape(orders=60, bad_every=100), seed=7)  # what generate made
    broken = sum(record.bad_reason is not None for record in as_avro(events, schema_id))
    assert f"dead_lettered={broken}," in ran.output
    expected = ExpectedOrders().run(events)
    assert compacted_json(kafka_bootstrap, target) == expected.active()
