"""The generated events in Avro (fastavro only: no Spark, no broker)."""

from __future__ import annotations

import io
from datetime import datetime

import fastavro
import orjson

from pipelines.avro import BAD_BODY, NOT_WIRE_FORMAT, UNKNOWN_SCHEMA_ID
from pipelines.orders.avro_events import ORDER_EVENT_SCHEMA, as_avro, broken_avro_records
from pipelines.orders.generator import StreamShape, broken_records, generate

SCHEMA = fastavro.parse_schema(ORDER_EVENT_SCHEMA)


def read(value: bytes) -> dict[str, object]:
    event = fastavro.schemaless_reader(io.BytesIO(value[5:]), SCHEMA, None)
    assert isinstance(event, dict)
    return event


def millis(event_time: object) -> int:
    if isinstance(event_time, int):
        return event_time
    assert isinstance(event_time, str)
    return round(datetime.fromisoformat(event_time).timestamp() * 1000)


def test_good_events_are_the_same_events_in_the_wire_format() -> None:
    records = generate(StreamShape(orders=40, bad_every=0, epoch_millis=0.5), seed=3)
    converted = as_avro(records, schema_id=258)
    assert len(converted) == len(records)
    kinds = set()
    for json_record, avro_record in zip(records, converted, strict=True):
        assert avro_record.key == json_record.key and avro_record.bad_reason is None
        assert avro_record.value[:5] == b"\x00\x00\x00\x01\x02"  # magic byte, id 258
        event, original = read(avro_record.value), orjson.loads(json_record.value)
        kinds.add(type(original["event_time"]))
        event_time = event.pop("event_time")
        assert isinstance(event_time, datetime)  # fastavro reads timestamp-millis so
        assert round(event_time.timestamp() * 1000) == millis(original.pop("event_time"))
        assert event == original
    assert kinds == {int, str}  # both ways of writing event_time were converted


def test_bad_events_keep_their_reason_or_become_avro_ones() -> None:
    converted = as_avro(broken_records(), schema_id=1)
    reasons = [record.bad_reason for record in converted]
    # The schema carries these (a rule refuses them): same event, same reason.
    for reason in ("unknown_status", "lat_out_of_range", "lon_out_of_range", "empty:order_id",
                   "future_timestamp"):  # fmt: skip
        assert reason in reasons
    assert "oversize" in reasons  # left as it is, refused unread
    # The rest cannot be written in the schema: each became an Avro way of being bad.
    gone = {"not_json", "not_object", "missing:lat", "wrong_type:lat", "bad_timestamp:event_time"}
    assert gone.isdisjoint(reasons)
    avro_reasons = {record.bad_reason for record in broken_avro_records(1)}
    assert set(reasons) - avro_reasons == {
        "unknown_status", "lat_out_of_range", "lon_out_of_range", "empty:order_id",
        "future_timestamp", "oversize",
    }  # fmt: skip


def test_broken_avro_records_name_each_avro_reason() -> None:
    broken = broken_avro_records(7)
    reasons = {record.bad_reason for record in broken}
    assert {NOT_WIRE_FORMAT, f"{UNKNOWN_SCHEMA_ID}1007", f"{BAD_BODY}7"} <= reasons
    assert {"not_finite:lat", "not_finite:lon"} <= reasons
