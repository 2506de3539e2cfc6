"""Avro validation on a static DataFrame shaped like the Kafka source's rows."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from pyspark.sql import SparkSession

from globalstore.errors import ConfigurationError
from pipelines.avro import new_schema_id, validate_avro
from pipelines.orders.avro_events import (
    ORDER_EVENT_SCHEMA,
    SCHEMA_TEXT,
    as_avro,
    broken_avro_records,
    encode,
    wire_format,
)
from pipelines.orders.generator import StreamShape, broken_records, generate
from pipelines.orders.transform import FIELDS
from pipelines.spec import DEFAULT_MAX_RECORD_BYTES
from pipelines.validate import REASON, validate
from tests.pipelines.test_validate import kafka_rows

pytestmark = pytest.mark.spark

GOOD = {"order_id": "o-1", "courier_id": "c-1", "status": "CREATED", "lat": -33.9,
        "lon": 151.0, "event_time": 1_767_261_600_250}  # fmt: skip


def checked(spark: SparkSession, values: list[bytes | None], schemas: dict[int, str]) -> list[Any]:
    rows = validate_avro(kafka_rows(spark, values), FIELDS, DEFAULT_MAX_RECORD_BYTES, schemas)
    return rows.orderBy("offset").collect()


def with_field_type(name: str, avro_type: Any) -> dict[str, Any]:
    fields = [
        {**f, "type": avro_type} if f["name"] == name else f for f in ORDER_EVENT_SCHEMA["fields"]
    ]
    return {**ORDER_EVENT_SCHEMA, "fields": fields}


def written(schema: dict[str, Any], schema_id: int, event: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), event)
    return wire_format(schema_id, body.getvalue())


def test_every_broken_avro_record_gets_its_reason_and_a_good_one_none(spark: SparkSession) -> None:
    broken = [*broken_avro_records(3), *as_avro(broken_records(), 3)]
    values = [encode(GOOD, 3), None, *(record.value for record in broken)]
    reasons = [row[REASON] for row in checked(spark, values, {3: SCHEMA_TEXT})]
    assert reasons == [None, "empty", *(record.bad_reason for record in broken)]


def test_an_unknown_schema_id_stops_the_batch_unless_known_to_be_absent(
    spark: SparkSession,
) -> None:
    values = [encode(GOOD, 3), encode(GOOD, 2), encode(GOOD, 9)]  # 2 older, 9 newer than 3
    rows = kafka_rows(spark, values)
    for absent_ids, stopped_for in ((frozenset({9}), 2), (frozenset({2}), 9)):
        stopping = validate_avro(
            rows, FIELDS, DEFAULT_MAX_RECORD_BYTES, {3: SCHEMA_TEXT}, True, absent_ids
        )
        with pytest.raises(Exception) as raised:
            stopping.collect()
        assert new_schema_id(raised.value) == stopped_for
    absent = validate_avro(
        rows, FIELDS, DEFAULT_MAX_RECORD_BYTES, {3: SCHEMA_TEXT}, True, frozenset({2, 9})
    )
    reasons = [row[REASON] for row in absent.orderBy("offset").collect()]
    assert reasons == [None, "unknown_schema_id:2", "unknown_schema_id:9"]


def test_the_transform_sees_the_rows_json_gives(spark: SparkSession) -> None:
    # Same events both ways (ISO text and epoch ms in JSON; timestamp-millis in Avro).
    events = generate(StreamShape(orders=30, bad_every=0, epoch_millis=0.5), seed=5)
    columns = [field.name for field in FIELDS] + [REASON]
    from_json = validate(kafka_rows(spark, [r.value for r in events]), FIELDS, 1 << 14)
    from_avro = checked(spark, [r.value for r in as_avro(events, 1)], {1: SCHEMA_TEXT})
    expected = [tuple(row[c] for c in columns) for row in from_json.orderBy("offset").collect()]
    assert [tuple(row[c] for c in columns) for row in from_avro] == expected
    assert len(expected) > 100 and all(row[-1] is None for row in expected)


def test_a_null_is_missing_and_a_timestamp_may_be_text_or_epoch_millis(
    spark: SparkSession,
) -> None:
    nullable = with_field_type("lat", ["null", "double"])
    as_text = with_field_type("event_time", "string")
    as_long = with_field_type("event_time", "long")
    schemas = {1: json.dumps(nullable), 2: json.dumps(as_text), 3: json.dumps(as_long)}
    values = [
        written(nullable, 1, {**GOOD, "lat": None}),
        written(nullable, 1, GOOD),
        written(as_text, 2, {**GOOD, "event_time": "2026-01-01T10:00:00.250Z"}),
        written(as_text, 2, {**GOOD, "event_time": "yesterday"}),
        written(as_long, 3, GOOD),
        written(as_long, 3, {**GOOD, "event_time": 2**62}),  # beyond epoch milliseconds
    ]
    rows = checked(spark, values, schemas)
    assert [row[REASON] for row in rows] == [
        "missing:lat",
        None,
        None,
        "bad_timestamp:event_time",
        None,
        "bad_timestamp:event_time",
    ]
    assert rows[1].lat == -33.9
    assert rows[2].event_time == rows[4].event_time == rows[1].event_time


def test_each_schema_id_decodes_with_its_own_schema(spark: SparkSession) -> None:
    # Version 2 added a field and made a number an int: both ids still type alike.
    added = {**with_field_type("lon", "int"), "fields": [
        *with_field_type("lon", "int")["fields"], {"name": "note", "type": "string"}]}  # fmt: skip
    schemas = {1: SCHEMA_TEXT, 2: json.dumps(added)}
    values = [encode(GOOD, 1), written(added, 2, {**GOOD, "lon": 151, "note": "x"})]
    rows = checked(spark, values, schemas)
    assert [row[REASON] for row in rows] == [None, None]
    typed = [tuple(row[field.name] for field in FIELDS) for row in rows]
    assert typed[0] == typed[1] == ("o-1", "c-1", "CREATED", -33.9, 151.0, rows[0].event_time)
    # The bodies are not interchangeable: read with the other id's schema, each is bad.
    swapped = [wire_format(2, values[0][5:]), wire_format(1, values[1][5:])]
    assert [row[REASON] for row in checked(spark, swapped, schemas)] == [
        "bad_avro_body:2",
        "bad_avro_body:1",
    ]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("{not json", "Avro schema 1 is not JSON"),
        ('"string"', "Avro schema 1 is not a record schema"),
        (json.dumps(with_field_type("lat", "string")), "field 'lat' of Avro schema 1 is string"),
        (json.dumps({**ORDER_EVENT_SCHEMA, "fields": ORDER_EVENT_SCHEMA["fields"][1:]}),
         "Avro schema 1 has no field 'order_id'"),
        (json.dumps(with_field_type("lat", "nosuchtype")), "Spark refused an Avro schema"),
    ],
)  # fmt: skip
def test_a_schema_that_cannot_give_the_fields_is_refused_before_the_run(
    spark: SparkSession, schema: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        validate_avro(kafka_rows(spark, []), FIELDS, DEFAULT_MAX_RECORD_BYTES, {1: schema})
