"""Parse raw Kafka records as JSON and name the first reason each one is unusable.

Everything here is Spark SQL, so validation never leaves the JVM. The JSON type of each
field is checked strictly: "12.5" is not a number and 12 is not a string, because a
producer that sends the wrong type has a bug worth seeing.

Two routes, one result:

- **Fast** (nearly every record): `from_json` with the fields' schema, one pass over the
  text. A record takes it only when nothing about it is in doubt: an object, no field
  missing, no conversion failed, every number finite, and no string field whose text
  could have come from a non-string token (`from_json` renders a number or an object as
  text for a string field, so text starting with a digit, `-`, `{` or `[`, or `true` /
  `false`, is in doubt; for a timestamp field, text a number, object, array or boolean
  could have made, unless it is epoch milliseconds: ISO-8601 text starts with a digit
  too, and sending all of it the exact way made validation three times slower).
- **Exact** (the rest): the record as a VARIANT, each field's JSON type looked up, so the
  reason names the first check that fails. It is computed only for those records.

Both routes type a field the same way, so which one a record took never shows.
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
_FAST_TYPES = {Kind.STRING: "string", Kind.NUMBER: "double", Kind.TIMESTAMP: "string"}
_IN_DOUBT = r"^[-0-9{\[]|^(true|false)$"  # text from_json may have made of a non-string
_NUMBER_TEXT = r"^[-+0-9.eE]+$"  # how from_json renders a JSON number as text
_NOT_TEXT = r"^[{\[]|^(true|false)$"  # ... and an object, an array or a boolean
_EPOCH_MS = r"^-?[0-9]{1,15}$"  # up to ±10^15 ms: about the year 33,658
_MAX_DOUBLE = 1.7976931348623157e308


def validate(raw: DataFrame, fields: tuple[Field, ...], max_record_bytes: int) -> DataFrame:
    """Raw Kafka rows -> source columns, one typed column per field, and REASON."""
    oversize = sf.octet_length("value") > max_record_bytes
    text = sf.when(~oversize, sf.col("value").cast("string"))
    parsed = raw.select(
        *SOURCE_COLUMNS,
        oversize.alias("_oversize"),
        text.alias("_text"),
        fast_parse(text, fields).alias("_fast"),
    )
    # Each expression once, as columns of their own: the checks below read them many
    # times, and expressions inside conditional branches are not shared by Spark.
    fast_ok = sf.ltrim("_text").startswith("{") & sf.col("_fast._corrupt").isNull()
    for field in fields:
        fast_ok = fast_ok & _fast_certain(field, sf.col(f"_fast.`{field.name}`"))
    routed = parsed.select(
        *SOURCE_COLUMNS,
        "_oversize",
        "_text",
        # A null check (a missing number) means "not certain", never null: the exact route
        # below parses exactly the records whose _fast_ok is false.
        sf.coalesce(fast_ok, sf.lit(False)).alias("_fast_ok"),
        *(_fast_typed(field).alias(_fast_column(field)) for field in fields),
    )
    docs = routed.select(
        *SOURCE_COLUMNS,
        "_oversize",
        "_fast_ok",
        *(_fast_column(field) for field in fields),
        # Only records in doubt are parsed as a VARIANT; for the others _doc stays null.
        sf.when(~sf.col("_fast_ok") & ~sf.col("_oversize"), sf.try_parse_json("_text"))
        .alias("_doc"),
    )  # fmt: skip
    looked_up = docs.select(
        *SOURCE_COLUMNS,
        "_oversize",
        "_fast_ok",
        *(_fast_column(field) for field in fields),
        sf.col("_doc").isNull().alias("_not_json"),
        sf.schema_of_variant("_doc").alias("_doc_type"),
        *(_json_type(field).alias(_type_column(field)) for field in fields),
        *(_exact_typed(field).alias(field.name) for field in fields),
    )
    exact_checks = [
        sf.when(sf.col("value").isNull(), sf.lit("empty")),
        sf.when(sf.col("_oversize"), sf.lit("oversize")),
        sf.when(sf.col("_not_json"), sf.lit("not_json")),
        sf.when(~sf.col("_doc_type").startswith("OBJECT"), sf.lit("not_object")),
    ]
    fast_checks = []
    for field in fields:
        exact_checks.extend(_type_checks(field))
        exact_checks.extend(_value_checks(field, sf.col(field.name)))
        fast_checks.extend(_value_checks(field, sf.col(_fast_column(field))))
    fast = sf.col("_fast_ok")
    return looked_up.select(
        *SOURCE_COLUMNS,
        *(
            sf.when(fast, sf.col(_fast_column(f))).otherwise(sf.col(f.name)).alias(f.name)
            for f in fields
        ),
        sf.when(fast, sf.coalesce(*fast_checks)).otherwise(sf.coalesce(*exact_checks))
        .alias(REASON),
    )  # fmt: skip


def fast_parse(text: Column, fields: tuple[Field, ...]) -> Column:
    """The fast route's one pass over the JSON text: a struct of the fields and `_corrupt`."""
    schema = ", ".join(f"`{f.name}` {_FAST_TYPES[f.kind]}" for f in fields)
    return sf.from_json(
        text, f"{schema}, _corrupt string", {"columnNameOfCorruptRecord": "_corrupt"}
    )


def _fast_certain(field: Field, value: Column) -> Column:
    """True when the fast parse of this field is certainly what the exact route would see."""
    if field.kind is Kind.NUMBER:  # NaN and ±Infinity come from strings: in doubt
        return value.between(-_MAX_DOUBLE, _MAX_DOUBLE)
    if field.kind is Kind.TIMESTAMP:
        # ISO text starts with a digit too, but no number renders with its T, colons or
        # zone; epoch milliseconds are fine either way (a JSON integer or a string).
        in_doubt = (value.rlike(_NUMBER_TEXT) & ~value.rlike(_EPOCH_MS)) | value.rlike(_NOT_TEXT)
        return value.isNotNull() & ~in_doubt
    return value.isNotNull() & ~value.rlike(_IN_DOUBT)


def _fast_typed(field: Field) -> Column:
    value = sf.col(f"_fast.`{field.name}`")
    return timestamp_of(value) if field.kind is Kind.TIMESTAMP else value


def timestamp_of(text: Column) -> Column:
    """ISO-8601 text, or digits of epoch milliseconds -> timestamp (null if neither)."""
    millis = sf.when(text.rlike(_EPOCH_MS), text.cast("bigint"))
    return sf.when(millis.isNotNull(), sf.timestamp_millis(millis)).otherwise(
        sf.try_to_timestamp(text)
    )


def _type_checks(field: Field) -> list[Column]:
    json_type = sf.col(_type_column(field))
    return [
        # An explicit JSON null counts as missing: the field carries no value either way.
        sf.when(json_type.isNull() | (json_type == "VOID"), sf.lit(f"missing:{field.name}")),
        sf.when(~json_type.rlike(_JSON_TYPES[field.kind]), sf.lit(f"wrong_type:{field.name}")),
    ]


def _value_checks(field: Field, typed: Column) -> list[Column]:
    checks = []
    if field.kind is Kind.TIMESTAMP:
        checks.append(sf.when(typed.isNull(), sf.lit(f"bad_timestamp:{field.name}")))
    checks.extend(sf.when(~rule.check(typed), sf.lit(rule.reason)) for rule in field.rules)
    return checks


def _json_type(field: Field) -> Column:
    return sf.schema_of_variant(sf.try_variant_get("_doc", _path(field), "variant"))


def _type_column(field: Field) -> str:
    return f"_type_{field.name}"


def _fast_column(field: Field) -> str:
    return f"_fast_{field.name}"


def _exact_typed(field: Field) -> Column:
    if field.kind is Kind.TIMESTAMP:  # an integer reads as its digits: epoch milliseconds
        return timestamp_of(sf.try_variant_get("_doc", _path(field), "string"))
    return sf.try_variant_get("_doc", _path(field), field.kind.value)


def _path(field: Field) -> str:
    return f"$['{field.name}']"
