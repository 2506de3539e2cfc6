"""Build the SparkSession every pipeline runs in (spark-submit or the Python launcher).

Under spark-submit the submitted configuration wins: defaults are only filled in where
nothing was given, so `--master yarn` or `--conf spark.sql.shuffle.partitions=64` hold.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import pyspark
from pyspark import SparkConf
from pyspark.sql import SparkSession

SCALA_BINARY = "2.13"
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{pyspark.__version__}"

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def session_defaults(master: str, shuffle_partitions: int) -> dict[str, str]:
    return {
        "spark.master": master,
        "spark.app.name": "globalstore-pipeline",
        "spark.jars.packages": KAFKA_CONNECTOR,
        # Stateful operators keep their state in RocksDB: bounded JVM heap, big state OK.
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # Commit a micro-batch by appending its changes to a changelog instead of taking a
        # RocksDB checkpoint every time: cut the state commit of a small stream-mode batch
        # from ~0.5-0.9 s to ~0.2-0.4 s (docs/benchmarks.md). Snapshots still happen in the
        # background maintenance task.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Spark's default of 200 shuffle partitions is 200 state-store instances per batch;
        # it is fixed in the checkpoint at the first run, so choose it deliberately.
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # Timestamps in the output are rendered in UTC whatever the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
    }


def build_session(
    master: str = "local[*]",
    shuffle_partitions: int = 4,
    extra: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return the (shared) SparkSession; `extra` overrides the defaults, spark-submit wins."""
    # Python workers must import pandas/pyarrow from this interpreter's environment, not
    # whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf()  # under spark-submit this already holds the submitted settings
    for key, value in {**session_defaults(master, shuffle_partitions), **(extra or {})}.items():
        conf.setIfMissing(key, value)
    return SparkSession.builder.config(conf=conf).getOrCreate()
