"""Shape rows for the Kafka sink: the topic contract for output, provenance for dead letters.

The Kafka sink takes key, value, topic and headers columns, so one streaming query writes
both topics and both are covered by the same checkpoint.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from globalstore.codec import VALUE_FORMAT_HEADER, VALUE_FORMAT_VERSION
from pipelines.validate import REASON

DLQ_REASON_HEADER = "globalstore.dlq.reason"
DLQ_TOPIC_HEADER = "globalstore.dlq.source.topic"
DLQ_PARTITION_HEADER = "globalstore.dlq.source.partition"
DLQ_OFFSET_HEADER = "globalstore.dlq.source.offset"

SINK_COLUMNS = ("key", "value", "topic", "headers")


def format_headers(version: int = VALUE_FORMAT_VERSION) -> Column:
    """The headers column of an output record: its value format (topic contract)."""
    return sf.array(_header(VALUE_FORMAT_HEADER, sf.lit(str(version))))


def output_records(transformed: DataFrame, topic: str) -> DataFrame:
    """(key, value struct or null) -> UTF-8 key, JSON object value or null (tombstone)."""
    headers = format_headers()
    return transformed.select(
        # Binary like the dead-letter columns, so both unite into one sink; cast = UTF-8.
        sf.col("key").cast("string").cast("binary").alias("key"),
        sf.to_json("value").cast("binary").alias("value"),  # a null struct stays null
        sf.lit(topic).alias("topic"),
        headers.alias("headers"),
    )


def dead_letter_records(rejected: DataFrame, topic: str) -> DataFrame:
    """Original key and bytes, untouched (so they can be replayed), plus why and whence."""
    headers = sf.array(
        _header(DLQ_REASON_HEADER, sf.col(REASON)),
        _header(DLQ_TOPIC_HEADER, sf.col("topic")),
        _header(DLQ_PARTITION_HEADER, sf.col("partition").cast("string")),
        _header(DLQ_OFFSET_HEADER, sf.col("offset").cast("string")),
    )
    return rejected.select("key", "value", sf.lit(topic).alias("topic"), headers.alias("headers"))


def _header(name: str, value: Column) -> Column:
    # Header values are bytes; ours are ASCII/UTF-8 text.
    return sf.struct(sf.lit(name).alias("key"), sf.encode(value, "UTF-8").alias("value"))
