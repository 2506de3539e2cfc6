"""Rewrite a compacted topic into a new compacted topic through a value converter: the Spark
half of a topic-to-topic migration (X.v1 -> X.v2). Applications then move from the old store
to the new one (globalstore.SwitchingStore, or `globalstore migrate switch`).

A batch job: it reads the source from its first to its current last offsets, keeps the latest
record of each key (the log cleaner may not have compacted the topic yet), converts each live
value with the user's function in Spark's Python workers, and writes the key, the converted
JSON and the new format header to the target; a tombstone stays a tombstone. If the
converter raises on any record nothing is written, and the error names the first ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from globalstore.errors import FatalError
from pipelines.failures import in_one_line
from pipelines.java_clients import spark_kafka_options
from pipelines.records import format_headers
from pipelines.topics import Admin, ensure_target

_SHOWN_FAILURES = 5


class RewriteRefused(FatalError):  # noqa: N818 - reads as what happened
    """The converter raised on some records: nothing was written to the target."""


def rewrite(
    spark: SparkSession,
    bootstrap_servers: str,
    source: str,
    target: str,
    convert: Callable[[Any], Any],
    value_format: int,
    kafka_config: Mapping[str, str] | None = None,
) -> int:
    """Write every key of `source`, its value converted and declared `value_format`, to
    `target` (created compacted if missing). Returns the records written. `kafka_config`:
    client settings with librdkafka's names, translated for Spark's source and sink."""
    settings = kafka_config or {}
    options = spark_kafka_options(settings, bootstrap_servers)
    ensure_target(Admin(bootstrap_servers, settings), source, target)
    with in_one_line(bootstrap_servers, {**settings, **options}):
        converted = _converted(_latest(spark, source, options), convert).cache()
        try:
            _refuse_failures(converted, source)
            out = converted.select(
                sf.col("key"),
                sf.col("converted.value").cast("binary").alias("value"),
                format_headers(value_format).alias("headers"),
            )
            out.write.format("kafka").options(**options).option("topic", target).save()
            return converted.count()
        finally:
            converted.unpersist()


def _latest(spark: SparkSession, source: str, options: Mapping[str, str]) -> DataFrame:
    """One row per key: the value, partition and offset of its last record."""
    raw = (
        spark.read.format("kafka")
        .options(**options)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    last = sf.max_by(sf.struct("value", "partition", "offset"), "offset")
    return raw.groupBy("key").agg(last.alias("last")).select("key", "last.*")


def _converted(latest: DataFrame, convert: Callable[[Any], Any]) -> DataFrame:
    # No type hints on the function: from hints pyspark would try to infer a pandas UDF.
    @sf.udf(returnType="struct<value:string,error:string>")
    def apply(value):  # type: ignore[no-untyped-def]
        if value is None:
            return None, None  # a tombstone stays one
        try:
            return orjson.dumps(convert(orjson.loads(bytes(value)))).decode(), None
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"

    return latest.withColumn("converted", apply("value"))


def _refuse_failures(converted: DataFrame, source: str) -> None:
    failed = converted.where(sf.col("converted.error").isNotNull())
    first = failed.limit(_SHOWN_FAILURES).collect()
    if not first:
        return
    named = "; ".join(
        f"key {bytes(row.key)!r} partition {row.partition} offset {row.offset}: "
        f"{row.converted.error}"
        for row in first
    )
    raise RewriteRefused(
        f"the converter failed on {failed.count()} records of {source!r}, e.g. {named}; "
        "nothing was written: fix the converter (or the records) and run it again"
    )
