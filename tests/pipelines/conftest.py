"""One SparkSession for every Spark test in this package (starting one costs seconds), and
one schema registry for those that use one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipelines.session import build_session
from tests.apicurio import MINIMUM_JAVA, java_at_least, running_apicurio


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


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real schema registry's Confluent API (Apicurio, tests/apicurio.py),
    started once for the session; the tests that use it skip, saying why, without Java 21+."""
    java = java_at_least(MINIMUM_JAVA)
    if java is None:
        pytest.skip(f"Apicurio Registry needs Java {MINIMUM_JAVA}+ and none is installed")
    log_file = tmp_path_factory.mktemp("apicurio") / "registry.log"
    with running_apicurio(java, log_file) as url:
        yield url
