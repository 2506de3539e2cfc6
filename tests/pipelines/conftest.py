"""One SparkSession for every Spark test in this package (starting one costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipelines.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        master="local[2]",
        shuffle_partitions=2,
        avro=True,  # the Avro tests share this session
        extra={"spark.ui.enabled": "false", "spark.sql.streaming.minBatchesToRetain": "5"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
