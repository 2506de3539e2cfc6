"""The generated raw order events as Avro in the Confluent wire format (fastavro).

`as_avro` turns the generator's JSON stream into the same events in Avro, record for
record, so the two formats can be run side by side: a good event, or a bad one the schema
can carry (an unknown status, an out-of-range latitude, a future time), keeps its reason;
one the schema cannot carry (not JSON, a missing field, a wrong type) is replaced by one of
`broken_avro_records`, in turn; the oversize one stays as it is (it is refused unread).
"""

from __future__ import annotations

import io
import itertools
import json
import math
from datetime import UTC, datetime
from typing import Any

import fastavro
import orjson

from pipelines.avro import BAD_BODY, NOT_WIRE_FORMAT, UNKNOWN_SCHEMA_ID
from pipelines.orders.generator import RawRecord
from pipelines.spec import DEFAULT_MAX_RECORD_BYTES

ORDER_EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "OrderEvent",
    "namespace": "globalstore.orders",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "courier_id", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "lat", "type": "double"},
        {"name": "lon", "type": "double"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
SCHEMA_TEXT = json.dumps(ORDER_EVENT_SCHEMA)
"""The schema as a .avsc file and a schema registry hold it."""

_PARSED = fastavro.parse_schema(ORDER_EVENT_SCHEMA)
_FIELDS = {field["name"] for field in ORDER_EVENT_SCHEMA["fields"]}
_STRINGS = ("order_id", "courier_id", "status")
_NUMBERS = ("lat", "lon")


def wire_format(schema_id: int, body: bytes) -> bytes:
    """Magic byte 0, the schema id in 4 bytes big-endian, the Avro body."""
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def encode(event: dict[str, Any], schema_id: int) -> bytes:
    """One event (event_time in epoch milliseconds) in the wire format."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, _PARSED, event)
    return wire_format(schema_id, body.getvalue())


def as_avro(records: list[RawRecord], schema_id: int) -> list[RawRecord]:
    """The JSON records as Avro with `schema_id` in their header (see the module's doc)."""
    broken = itertools.cycle(broken_avro_records(schema_id))
    converted = []
    for record in records:
        event = _avro_event(record.value)
        if event is not None:
            converted.append(RawRecord(record.key, encode(event, schema_id), record.bad_reason))
        elif len(record.value) > DEFAULT_MAX_RECORD_BYTES:
            converted.append(record)
        else:
            converted.append(next(broken))
    return converted


def broken_avro_records(schema_id: int, order_id: str = "o-broken") -> list[RawRecord]:
    """One record per way an Avro record can be bad, each with its expected reason."""
    good = {"order_id": order_id, "courier_id": "c-0001", "status": "IN_TRANSIT",
            "lat": 52.5, "lon": 13.4, "event_time": 1_767_225_600_000}  # fmt: skip
    body = encode(good, schema_id)
    key, unknown = order_id.encode(), schema_id + 1000
    return [
        RawRecord(key, b"\x00\x00\x00", NOT_WIRE_FORMAT),  # shorter than the header
        RawRecord(key, b"\x01" + body[1:], NOT_WIRE_FORMAT),  # another magic byte
        RawRecord(key, orjson.dumps(good), NOT_WIRE_FORMAT),  # JSON on an Avro topic
        RawRecord(key, wire_format(unknown, body[5:]), f"{UNKNOWN_SCHEMA_ID}{unknown}"),
        RawRecord(key, body[:-3], f"{BAD_BODY}{schema_id}"),  # cut short
        RawRecord(key, body + b"\x02\x02", f"{BAD_BODY}{schema_id}"),  # bytes left over
        RawRecord(key, encode({**good, "lat": math.nan}, schema_id), "not_finite:lat"),
        RawRecord(key, encode({**good, "lon": -math.inf}, schema_id), "not_finite:lon"),
    ]  # fmt: skip


def _avro_event(value: bytes) -> dict[str, Any] | None:
    """The JSON event as the schema takes it, or None if the schema cannot carry it."""
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(event, dict) or set(event) != _FIELDS:
        return None
    if not all(isinstance(event[name], str) for name in _STRINGS):
        return None
    if not all(_is_number(event[name]) for name in _NUMBERS):
        return None
    millis = _epoch_millis(event["event_time"])
    return None if millis is None else {**event, "event_time": millis}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _epoch_millis(value: Any) -> int | None:
    """event_time as the JSON route reads it (epoch ms, or ISO-8601 text, UTC if no zone)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)
