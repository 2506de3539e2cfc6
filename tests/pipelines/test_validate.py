"""Validation on a static DataFrame shaped like the Kafka source's rows."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from pyspark.sql import SparkSession

from pipelines.orders.generator import broken_records
from pipelines.orders.transform import FIELDS
from pipelines.session import JIT_METHOD_LIMIT
from pipelines.spec import DEFAULT_MAX_RECORD_BYTES, Field, Kind
from pipelines.validate import REASON, validate

pytestmark = pytest.mark.spark

GOOD = (
    b'{"order_id": "o-1", "courier_id": "c-1", "status": "CREATED", "lat": -33.9, '
    b'"lon": 151, "event_time": "2026-01-01T10:00:00.250Z", "extra": [1]}'
)


def kafka_rows(spark: SparkSession, values: list[bytes | None]):  # type: ignore[no-untyped-def]
    rows = [(b"k", value, "raw", 0, offset) for offset, value in enumerate(values)]
    return spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long"
    )


def test_every_broken_record_gets_its_reason_and_a_good_one_none(spark: SparkSession) -> None:
    broken = broken_records()
    values = [GOOD, None, *(record.value for record in broken)]
    checked = validate(kafka_rows(spark, values), FIELDS, DEFAULT_MAX_RECORD_BYTES)
    reasons = [row[REASON] for row in checked.orderBy("offset").collect()]
    assert reasons == [None, "empty", *(record.bad_reason for record in broken)]


def test_clean_record_is_typed(spark: SparkSession) -> None:
    row = validate(kafka_rows(spark, [GOOD]), FIELDS, DEFAULT_MAX_RECORD_BYTES).first()
    assert row is not None
    assert (row.order_id, row.status, row.lat, row.lon) == ("o-1", "CREATED", -33.9, 151.0)
    assert row.event_time == dt.datetime(2026, 1, 1, 10, 0, 0, 250000)


def test_event_time_may_be_epoch_millis(spark: SparkSession) -> None:
    millis = GOOD.replace(b'"2026-01-01T10:00:00.250Z"', b"1767261600250")
    row = validate(kafka_rows(spark, [millis]), FIELDS, DEFAULT_MAX_RECORD_BYTES).first()
    assert row is not None
    assert row[REASON] is None
    assert row.event_time == dt.datetime(2026, 1, 1, 10, 0, 0, 250000)


def test_out_of_range_epoch_millis_is_a_bad_timestamp_not_a_crash(spark: SparkSession) -> None:
    huge = GOOD.replace(b'"2026-01-01T10:00:00.250Z"', b"9223372036854775807")
    row = validate(kafka_rows(spark, [huge]), FIELDS, DEFAULT_MAX_RECORD_BYTES).first()
    assert row is not None
    assert row[REASON] == "bad_timestamp:event_time"


IN_DOUBT = [  # records the fast route must hand to the exact one, and what that says
    (b'"order_id": "o-1"', b'"order_id": "12345"', None),  # a string that looks numeric
    (b'"order_id": "o-1"', b'"order_id": 12345', "wrong_type:order_id"),
    (b'"order_id": "o-1"', b'"order_id": {"id": 1}', "wrong_type:order_id"),
    (b'"status": "CREATED"', b'"status": true', "wrong_type:status"),
    (b'"lat": -33.9', b'"lat": "NaN"', "wrong_type:lat"),
    (b'"lon": 151', b'"lon": "Infinity"', "wrong_type:lon"),
    (b'"event_time": "2026-01-01T10:00:00.250Z"', b'"event_time": 1.5e12',
     "wrong_type:event_time"),
    (b'"event_time": "2026-01-01T10:00:00.250Z"', b'"event_time": [1]',
     "wrong_type:event_time"),
    # Timestamp text without a colon is in doubt, whether it is valid or not.
    (b'"event_time": "2026-01-01T10:00:00.250Z"', b'"event_time": "2026-01-01"', None),
    (b'"event_time": "2026-01-01T10:00:00.250Z"', b'"event_time": "soon"',
     "bad_timestamp:event_time"),
    (b'"courier_id": "c-1"', b'"courier_id": "[c-1]"', None),  # text like an array
]  # fmt: skip


def test_records_in_doubt_get_the_exact_reason(spark: SparkSession) -> None:
    values = [GOOD.replace(old, new) for old, new, _ in IN_DOUBT]
    assert all(value != GOOD for value in values)
    checked = validate(kafka_rows(spark, values), FIELDS, DEFAULT_MAX_RECORD_BYTES)
    rows = checked.orderBy("offset").collect()
    assert [row[REASON] for row in rows] == [reason for _, _, reason in IN_DOUBT]
    assert rows[0].order_id == "12345"


def test_epoch_millis_as_digits_text_is_the_same_instant(spark: SparkSession) -> None:
    digits = GOOD.replace(b'"2026-01-01T10:00:00.250Z"', b'"1767261600250"')
    array = b"[" + GOOD + b"]"  # not an object, though from_json could read its element
    checked = validate(kafka_rows(spark, [digits, array]), FIELDS, DEFAULT_MAX_RECORD_BYTES)
    rows = checked.orderBy("offset").collect()
    assert [row[REASON] for row in rows] == [None, "not_object"]
    assert rows[0].event_time == dt.datetime(2026, 1, 1, 10, 0, 0, 250000)


def test_wider_validation_outgrows_the_jit_limit_so_the_session_caps_generated_methods(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    # The premise of the session's cap: one field more than the orders job and the stage's
    # generated method is too big for the JVM to compile. Should Spark ever generate less,
    # this fails and the cap can go.
    wider = (*FIELDS, Field("note", Kind.STRING))
    validate(kafka_rows(spark, [GOOD]), wider, DEFAULT_MAX_RECORD_BYTES).explain("codegen")
    sizes = [int(size) for size in re.findall(r"maxMethodCodeSize:(\d+)", capsys.readouterr().out)]
    assert max(sizes) > JIT_METHOD_LIMIT
    assert int(spark.conf.get("spark.sql.codegen.hugeMethodLimit")) == JIT_METHOD_LIMIT
