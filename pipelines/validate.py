"""Parse raw Kafka records as JSON and name the first reason each one is unusable.

Everything here is Spark SQL (the VARIANT functions), so validation never leaves the JVM.
The JSON type of each field is checked strictly: "12.5" is not a number and 12 is not a
string, because a producer that sends the wrong type has a bug worth seeing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from pipelines.spec import Field, Kind

REASON = "_reason"
"""Column holding the dead-letter reason; null means the record is clean."""

SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset")

# schema_of_variant names of the JSON types each kind accepts.
_INTEGER = "TINYINT|SMALLINT|INT|BIGINT"
_JSON_TYPES = {
    Kind.STRING: "^STRING$",
    Kind.NUMBER: f"^({_INTEGER}|FLOAT|DOUBLE|DECIMAL.*)$",
    Kind.TIMESTAMP: f"^(STRING|{_INTEGER})$",  # ISO-8601 text or epoch milliseconds
}


def validate(raw: DataFrame, fields: tuple[Field, ...], max_record_bytes: int) -> DataFrame:
    """Raw Kafka rows -> source columns, one typed column per field, and REASON."""
    oversize = sf.octet_length("value") > max_record_bytes
    doc = sf.when(~oversize, sf.try_parse_json(sf.col("value").cast("string")))
    parsed = raw.select(*SOURCE_COLUMNS, oversize.alias("_oversize"), doc.alias("_doc"))
    # Each variant lookup once, as columns of their own: the checks below read them many
    # times, and expressions inside conditional branches are not shared by Spark.
    looked_up = parsed.select(
        *SOURCE_COLUMNS,
        "_oversize",
        sf.col("_doc").isNull().alias("_not_json"),
        sf.schema_of_variant("_doc").alias("_doc_type"),
        *(_json_type(field).alias(_type_column(field)) for field in fields),
        *(_typed(field).alias(field.name) for field in fields),
    )
    checks = [
        sf.when(sf.col("value").isNull(), sf.lit("empty")),
        sf.when(sf.col("_oversize"), sf.lit("oversize")),
        sf.when(sf.col("_not_json"), sf.lit("not_json")),
        sf.when(~sf.col("_doc_type").startswith("OBJECT"), sf.lit("not_object")),
    ]
    for field in fields:
        checks.extend(_field_checks(field))
    return looked_up.select(
        *SOURCE_COLUMNS, *(field.name for field in fields), sf.coalesce(*checks).alias(REASON)
    )


_MAX_EPOCH_MS = 10**14  # about the year 5138


def _field_checks(field: Field) -> list[Column]:
    json_type, typed = sf.col(_type_column(field)), sf.col(field.name)
    checks = [
        # An explicit JSON null counts as missing: the field carries no value either way.
        sf.when(json_type.isNull() | (json_type == "VOID"), sf.lit(f"missing:{field.name}")),
        sf.when(~json_type.rlike(_JSON_TYPES[field.kind]), sf.lit(f"wrong_type:{field.name}")),
    ]
    if field.kind is Kind.TIMESTAMP:
        checks.append(sf.when(typed.isNull(), sf.lit(f"bad_timestamp:{field.name}")))
    checks.extend(sf.when(~rule.check(typed), sf.lit(rule.reason)) for rule in field.rules)
    return checks


def _json_type(field: Field) -> Column:
    return sf.schema_of_variant(sf.try_variant_get("_doc", _path(field), "variant"))


def _type_column(field: Field) -> str:
    return f"_type_{field.name}"


def _typed(field: Field) -> Column:
    if field.kind is Kind.TIMESTAMP:
        text = sf.try_variant_get("_doc", _path(field), "string")
        millis = sf.try_variant_get("_doc", _path(field), "bigint")
        # Out of range epoch ms would overflow (an error in ANSI mode): a bad_timestamp.
        in_range = millis.between(-_MAX_EPOCH_MS, _MAX_EPOCH_MS)
        return sf.when(_json_type(field) == "STRING", sf.try_to_timestamp(text)).when(
            in_range, sf.timestamp_millis(millis)
        )
    return sf.try_variant_get("_doc", _path(field), field.kind.value)


def _path(field: Field) -> str:
    return f"$['{field.name}']"
