"""Schema evolution end to end, with a real registry (Apicurio), real Kafka and real Spark.

A stream run decodes version 1 of the raw topic's schema. While it runs, a compatible
version 2 (an added optional field) is registered and records written with it arrive among
version-1 records: the run picks version 2 up when its first record comes (the batch that
met it wrote nothing and runs again) and both reach the transformed topic and every store.
An incompatible version is refused by the registry (409) in one line, and the run goes on
as if nothing happened. Records naming an id no subject holds are dead letters.
"""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastavro
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pipelines import skeleton
from pipelines.avro import UNKNOWN_SCHEMA_ID
from pipelines.cli import register_schema
from pipelines.metrics import RunSummary
from pipelines.orders.avro_events import ORDER_EVENT_SCHEMA, SCHEMA_TEXT, as_avro, wire_format
from pipelines.orders.generator import RawRecord, StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from pipelines.records import DLQ_REASON_HEADER
from pipelines.schema_registry import register, set_compatibility, subject_of, subject_schemas
from tests.pipelines.kafka_read import compacted_json, read_topic, restored_store
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.integration]

# Version 2 adds an optional field: BACKWARD compatible (a reader of version 2 takes version
# 1's records, the field then null), so the registry accepts it.
V2_SCHEMA = {
    **ORDER_EVENT_SCHEMA,
    "fields": [
        *ORDER_EVENT_SCHEMA["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
# lat as a string: a reader of this version cannot read version 1's doubles. Refused.
BROKEN_SCHEMA = {
    **ORDER_EVENT_SCHEMA,
    "fields": [
        {**f, "type": "string"} if f["name"] == "lat" else f for f in ORDER_EVENT_SCHEMA["fields"]
    ],
}
_V1 = fastavro.parse_schema(ORDER_EVENT_SCHEMA)
_V2 = fastavro.parse_schema(V2_SCHEMA)


def as_version_2(records: list[RawRecord], v1_id: int, v2_id: int) -> list[RawRecord]:
    """Every good version-1 record rewritten with version 2 (every other one with a note);
    the broken ones stay as they were."""
    converted = []
    for n, record in enumerate(records):
        if record.bad_reason is not None:
            converted.append(record)
            continue
        assert record.value[:5] == wire_format(v1_id, b"")
        event = fastavro.schemaless_reader(io.BytesIO(record.value[5:]), _V1, None)
        body = io.BytesIO()
        note = f"leave at the door {n}" if n % 2 else None
        fastavro.schemaless_writer(body, _V2, {**event, "note": note})  # type: ignore[dict-item]
        converted.append(RawRecord(record.key, wire_format(v2_id, body.getvalue())))
    return converted


@contextmanager
def waited_in_a_thread(run: skeleton.PipelineRun) -> Iterator[dict[str, Any]]:
    """The run's wait() in a thread, as the CLI's stream run waits (it is where a query that
    stopped for a new schema starts again); the run stopped and the summary in the dict at
    the end."""
    ended: dict[str, Any] = {}

    def wait() -> None:
        try:
            ended["summary"] = run.wait()
        except BaseException as exc:  # handed to the test, which fails on it
            ended["error"] = exc

    thread = threading.Thread(target=wait, name="pipeline-wait")
    thread.start()
    try:
        yield ended
    finally:
        run.query.stop()
        thread.join(120)
    assert "error" not in ended, ended.get("error")


@pytest.mark.timeout(900)
def test_a_compatible_schema_flows_through_and_an_incompatible_one_is_refused(
    spark: SparkSession,
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    schema_registry: str,
) -> None:
    source = make_topic(partitions=2, compact=False, prefix="evolve-raw")
    subject = subject_of(source)
    set_compatibility(schema_registry, subject, "BACKWARD")
    v1_id = register(schema_registry, subject, SCHEMA_TEXT)
    run = uuid.uuid4().hex[:8]
    options = skeleton.RunOptions(
        bootstrap_servers=kafka_bootstrap,
        source_topic=source,
        target_topic=f"evolve-current-{run}",
        dead_letter_topic=f"evolve-dlq-{run}",
        checkpoint_dir=tmp_path / "checkpoint",
        mode="stream",
        max_offsets_per_trigger=200,
        avro_schemas=subject_schemas(schema_registry, subject),
        avro_lookup=lambda: subject_schemas(schema_registry, subject),
    )
    shape = StreamShape(orders=80, bad_every=40)
    first = as_avro(generate(shape, seed=21), v1_id)  # broken ones include an unknown id
    second_events = generate(shape, seed=22, first_order=60)
    expected = ExpectedOrders().run(generate(shape, seed=21))
    produce(kafka_bootstrap, source, first)

    def current() -> object:
        return compacted_json(kafka_bootstrap, options.target_topic)

    started = skeleton.start(spark, ORDERS, options)
    with waited_in_a_thread(started) as ended:
        after_first = expected.active()
        eventually(lambda: current() == after_first, 300, lambda: started.summary, 2.0)

        v2_id = register(schema_registry, subject, json.dumps(V2_SCHEMA))
        broken_file = tmp_path / "broken.avsc"
        broken_file.write_text(json.dumps(BROKEN_SCHEMA))
        refused = CliRunner().invoke(
            register_schema,
            ["--schema-registry", schema_registry, "--topic", source, str(broken_file)],
        )
        assert refused.exit_code == 2
        [line] = refused.output.strip().splitlines()
        assert line.startswith("error: ") and "refused the schema as incompatible" in line, line
        assert "409" in line, line
        assert set(subject_schemas(schema_registry, subject)) == {v1_id, v2_id}

        # Old and new versions interleaved, as producers upgrade one by one.
        second_v1 = as_avro(second_events, v1_id)
        second_v2 = as_version_2(second_v1, v1_id, v2_id)
        pairs = enumerate(zip(second_v1, second_v2, strict=True))
        second = [new if n % 3 else old for n, (old, new) in pairs]
        produce(kafka_bootstrap, source, second)
        expected.run(second_events)
        eventually(lambda: current() == expected.active(), 600, lambda: started.summary, 2.0)
    summary: RunSummary = ended["summary"]

    assert started.options.avro_schemas is not None
    assert set(started.options.avro_schemas) == {v1_id, v2_id}
    unknown_ids = {v1_id + 1000}  # as_avro's broken records name it
    assert started.options.avro_absent_ids == unknown_ids
    assert summary.schema_restarts == 2  # the unknown id once, version 2 once
    # Every bad record once in the dead letters, with its reason: none of version 2's,
    # and none twice (a batch stopped for a new id wrote nothing).
    dead = read_topic(kafka_bootstrap, options.dead_letter_topic)
    assert sorted((r.value, r.headers[DLQ_REASON_HEADER].decode()) for r in dead) == sorted(
        (r.value, r.bad_reason) for r in first + second if r.bad_reason is not None
    )
    assert f"{UNKNOWN_SCHEMA_ID}{v1_id + 1000}" in {
        r.headers[DLQ_REASON_HEADER].decode() for r in dead
    }
    # Every store built from the transformed topic holds it all.
    for n in range(2):
        store = restored_store(kafka_bootstrap, options.target_topic, tmp_path / f"store-{n}")
        assert store == expected.active()
