"""Raw records as Avro in the Confluent wire format, decoded and checked in Spark SQL.

The wire format is a magic byte 0, the writer's schema id (4 bytes, big-endian), then the
Avro body. The header is checked in SQL, the body decoded by Spark's own `from_avro` with
the schema of that id (the run is given {id: schema}, from a schema registry or a .avsc
file). Out comes what `validate.validate` gives for JSON: the source columns, one column
per field typed the same way, and the reason, so the transform and the dead letters never
see which format the record came in. The typed fields go through validate.py's own value
checks; what JSON needs checking and Avro does not (the JSON type of each field) is
settled once per schema when the run starts: a schema without a field, or with a type
the field's kind cannot take, is refused then (ConfigurationError).

A run that can look its subject up again (a registry) stops a micro-batch that meets a
schema id it does not know, before the batch writes anything (the check runs before the
exchange, the Kafka sink after it): the run looks the subject up and starts the query
again from its checkpoint (skeleton.PipelineRun). Not only ids above the known ones: a
registry gives a schema it already holds (under another subject) its old id. An id the
subject turned out not to hold is then a dead letter like any unknown id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Set
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql import types as st
from pyspark.sql.avro.functions import from_avro

from globalstore.errors import ConfigurationError
from pipelines.spec import Field, Kind
from pipelines.validate import REASON, SOURCE_COLUMNS, timestamp_of, value_checks

WIRE_HEADER_BYTES = 5  # magic byte 0 + schema id
NOT_WIRE_FORMAT = "not_avro_wire_format"
UNKNOWN_SCHEMA_ID = "unknown_schema_id:"  # + the id
BAD_BODY = "bad_avro_body:"  # + the id: the body does not decode as that schema
NEW_SCHEMA_ID = "globalstore.avro.new_schema_id="  # + the id: the batch stopped for it
_NEW_SCHEMA_PATTERN = re.compile(re.escape(NEW_SCHEMA_ID) + r"(\d+)")

# Spark types (as from_avro makes them of Avro types) each kind takes.
_ACCEPTED: dict[Kind, tuple[type[st.DataType], ...]] = {
    Kind.STRING: (st.StringType,),  # Avro string or enum
    Kind.NUMBER: (st.DoubleType, st.FloatType, st.IntegerType, st.LongType),
    # timestamp-millis/-micros; or epoch milliseconds as a long, or ISO-8601 as a string,
    # read as validate.py reads them in JSON.
    Kind.TIMESTAMP: (st.TimestampType, st.LongType, st.StringType),
}
_FRAME = "GlobalstoreAvroFrame"


def validate_avro(
    raw: DataFrame,
    fields: tuple[Field, ...],
    max_record_bytes: int,
    schemas: Mapping[int, str],
    stop_on_unknown: bool = False,
    absent_ids: Set[int] = frozenset(),
) -> DataFrame:
    """Raw Kafka rows -> source columns, one typed column per field, and REASON.
    `schemas`: {schema id: Avro schema (JSON text)} of the ids this run decodes.
    `stop_on_unknown`: a record with an id not among them, and not in `absent_ids` (ids its
    subject was found not to hold), fails the batch naming the id (new_schema_id)."""
    if not schemas:
        raise ConfigurationError("an Avro run needs at least one reader schema")
    value = sf.col("value")
    header = sf.hex(sf.substring(value, 1, WIRE_HEADER_BYTES))  # "00" + the id's 8 digits
    oversize = sf.octet_length(value) > max_record_bytes
    wire = ~oversize & (sf.octet_length(value) >= WIRE_HEADER_BYTES) & header.startswith("00")
    headed = raw.select(
        *SOURCE_COLUMNS,
        oversize.alias("_oversize"),
        wire.alias("_wire"),
        sf.when(wire, sf.conv(sf.substring(header, 3, 8), 16, 10).cast("long")).alias("_id"),
    )
    decoded, types = _decoded(headed, schemas, max_record_bytes)
    # Only the column of the record's own id is not null: coalesce picks it.
    typed = {
        field.name: sf.coalesce(
            *(_typed(field, schema_id, types[schema_id]) for schema_id in schemas)
        )
        for field in fields
    }
    # Whether the record carries the field at all, apart from whether it converts (text
    # that is no timestamp is a bad_timestamp, as in JSON, not a missing field).
    present = {
        field.name: sf.coalesce(
            *(
                sf.when(sf.col("_id") == schema_id, _field(schema_id, field).isNotNull())
                for schema_id in schemas
            )
        )
        for field in fields
    }
    id_text = sf.col("_id").cast("string")
    ends = sf.coalesce(*(sf.col(f"{_column(schema_id)}.end") for schema_id in schemas))
    checks = [
        sf.when(value.isNull(), sf.lit("empty")),
        sf.when(sf.col("_oversize"), sf.lit("oversize")),
        sf.when(~sf.col("_wire"), sf.lit(NOT_WIRE_FORMAT)),
        *([_stop_on_unknown(schemas, absent_ids)] if stop_on_unknown else []),
        sf.when(~sf.col("_id").isin(*schemas), sf.concat(sf.lit(UNKNOWN_SCHEMA_ID), id_text)),
        sf.when(~sf.coalesce(ends, sf.lit(False)), sf.concat(sf.lit(BAD_BODY), id_text)),
    ]
    for field in fields:
        checks.extend(_field_checks(field, present[field.name], typed[field.name]))
    return decoded.select(
        *SOURCE_COLUMNS,
        *(column.alias(name) for name, column in typed.items()),
        sf.coalesce(*checks).alias(REASON),
    )


def _stop_on_unknown(schemas: Mapping[int, str], absent_ids: Set[int]) -> Column:
    new = ~sf.col("_id").isin(*schemas)
    if absent_ids:
        new = new & ~sf.col("_id").isin(*sorted(absent_ids))
    message = sf.concat(sf.lit(NEW_SCHEMA_ID), sf.col("_id").cast("string"))
    return sf.when(new, sf.raise_error(message)).cast("string")


def new_schema_id(failure: BaseException) -> int | None:
    """The schema id a batch stopped for (see validate_avro), or None for any other failure."""
    found = _NEW_SCHEMA_PATTERN.search(str(failure))
    return None if found is None else int(found.group(1))


def _decode(schema_id: int, schema: str, max_record_bytes: int) -> Column:
    """The body, decoded as `schema` framed (see _framed) in a record with an `end` flag.

    from_avro in PERMISSIVE mode gives a record whose fields are all null for a body it
    cannot read, which a record with nullable fields could also be; and it ignores bytes
    left over after the record. So the body goes in with a boolean true (byte 1) appended,
    read as the frame's last field: `end` is null when the body did not decode, false when
    bytes were left over after the record (unless the first of them is a 1), else true."""
    body = sf.concat(
        sf.substring("value", WIRE_HEADER_BYTES + 1, max_record_bytes),
        sf.unhex(sf.lit("01")),
    )
    return from_avro(body, _framed(schema_id, schema), {"mode": "PERMISSIVE"})


def _framed(schema_id: int, schema: str) -> str:
    """A record of the writer's record and a boolean: in Avro's binary encoding a record is
    its fields one after the other, so the frame's encoding is the body, then the flag."""
    try:
        parsed: Any = json.loads(schema)
    except ValueError as exc:
        raise ConfigurationError(f"Avro schema {schema_id} is not JSON: {exc}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise ConfigurationError(f"Avro schema {schema_id} is not a record schema")
    return json.dumps(
        {
            "type": "record",
            "name": _FRAME,
            "fields": [{"name": "record", "type": parsed}, {"name": "end", "type": "boolean"}],
        }
    )


def _decoded(
    headed: DataFrame, schemas: Mapping[int, str], max_record_bytes: int
) -> tuple[DataFrame, dict[int, st.StructType]]:
    """One decoded column per schema, each computed only for its own id (the columns after
    read them many times, and Spark does not share an expression inside conditional
    branches); and the Spark type from_avro gives each schema's record."""
    columns = [
        sf.when(sf.col("_id") == schema_id, _decode(schema_id, schema, max_record_bytes))
        .alias(_column(schema_id))
        for schema_id, schema in schemas.items()
    ]  # fmt: skip
    try:  # Spark parses the schemas here, analysing the plan
        decoded = headed.select(*SOURCE_COLUMNS, "_oversize", "_wire", "_id", *columns)
        schema = decoded.schema
    except (PySparkException, Py4JError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(f"Spark refused an Avro schema: {first}") from None
    found = {}
    for schema_id in schemas:
        frame = schema[_column(schema_id)].dataType
        assert isinstance(frame, st.StructType)
        record = frame["record"].dataType
        assert isinstance(record, st.StructType)
        found[schema_id] = record
    return decoded, found


def _typed(field: Field, schema_id: int, record: st.StructType) -> Column:
    """The field of schema `schema_id`'s record as validate.py types it."""
    if field.name not in record.fieldNames():
        raise ConfigurationError(f"Avro schema {schema_id} has no field {field.name!r}")
    spark_type = record[field.name].dataType
    if not isinstance(spark_type, _ACCEPTED[field.kind]):
        raise ConfigurationError(
            f"field {field.name!r} of Avro schema {schema_id} is {spark_type.simpleString()}, "
            f"which a {field.kind.name.lower()} field cannot take"
        )
    value = _field(schema_id, field)
    if field.kind is Kind.NUMBER:
        return value.cast("double")
    if field.kind is Kind.TIMESTAMP and not isinstance(spark_type, st.TimestampType):
        return timestamp_of(value.cast("string"))
    return value


def _field(schema_id: int, field: Field) -> Column:
    return sf.col(f"{_column(schema_id)}.record.`{field.name}`")


def _field_checks(field: Field, present: Column, typed: Column) -> list[Column]:
    # A null is a missing value (the schema lets the field be null), as in JSON.
    checks = [sf.when(~present, sf.lit(f"missing:{field.name}"))]
    if field.kind is Kind.NUMBER:  # Avro carries NaN and infinities, which JSON cannot
        checks.append(sf.when(~(sf.abs(typed) < float("inf")), sf.lit(f"not_finite:{field.name}")))
    return checks + value_checks(field, typed)


def _column(schema_id: int) -> str:
    return f"_avro_{schema_id}"
