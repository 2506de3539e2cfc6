"""Build the SparkSession every pipeline runs in (spark-submit or the Python launcher).

Two ways in, one rule: whatever the user configured wins.

- **Under spark-submit** the JVM already runs with the submitted master, jars, packages and
  confs. The session is taken as it is; only the pipeline's SQL settings
  (`SQL_DEFAULTS`) are filled in where the submitted configuration has no value, so
  `--conf spark.sql.shuffle.partitions=64` holds and `--master` is never touched.
- **The Python launcher** (`globalstore pipeline run`) builds the session itself: then it
  also picks the master (`local[*]` by default) and resolves the Kafka connector, and
  Spark's Avro connector only for an Avro run, so that a JSON run needs only what JSON
  needs (an offline machine's Ivy cache filled by a JSON run, say).

A process has one session (`getOrCreate`), whose packages are fixed when it starts: an Avro
run on a session started without the Avro connector is refused (`require_avro`), in one
line, rather than failing inside `from_avro`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyspark
from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession

from globalstore.errors import ConfigurationError
from pipelines.defaults import LOCAL_MASTER
from pipelines.java_clients import SECRET_OPTIONS_REGEX

SCALA_BINARY = "2.13"
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{pyspark.__version__}"
# Spark's from_avro, for raw topics of Avro records (pipelines/avro.py).
AVRO_CONNECTOR = f"org.apache.spark:spark-avro_{SCALA_BINARY}:{pyspark.__version__}"

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

JIT_METHOD_LIMIT = 8000
"""Bytes of bytecode above which HotSpot does not compile a method (HugeMethodLimit)."""

PANDAS_3_WARNING = "PySpark does not yet fully support pandas"
"""The start of the FutureWarning PySpark 4.2 gives at every pandas step under pandas 3: this
project runs on pandas 3 on purpose, tested (docs/pipelines.md), so the warning is silenced."""

SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"
"""Set by spark-submit for the Python driver it starts: the JVM to attach to."""


def sql_defaults(shuffle_partitions: int) -> dict[str, str]:
    """Settings the job relies on, applied at runtime unless the user set them."""
    return {
        # Stateful operators keep their state in RocksDB: bounded JVM heap, big state OK.
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # Commit a micro-batch by appending its changes to a changelog instead of taking a
        # RocksDB checkpoint every time: cut the state commit of a small stream-mode batch
        # from ~0.5-0.9 s to ~0.2-0.4 s (benchmarks/results/history.md, "Pipeline"). Snapshots
        # still happen in the background maintenance task.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Spark's default of 200 shuffle partitions is 200 state-store instances per batch;
        # it is fixed in the checkpoint at the first run, so choose it deliberately.
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # Timestamps in the output are rendered in UTC whatever the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        # Whole-stage code generation compiles a stage into one Java method, and the JVM
        # never JIT-compiles a method over 8,000 bytes of bytecode: it runs interpreted.
        # Validation of the 6 orders fields is 7,626 bytes, one more field crosses it; at
        # this limit Spark generates code per operator instead (validation 20 % faster
        # than interpreted, docs/performance.md, "Pipeline").
        "spark.sql.codegen.hugeMethodLimit": str(JIT_METHOD_LIMIT),
        # Plans (explain, the UI's SQL tab, a failed query's message) show the Kafka source's
        # and sink's options, redacting the values whose name matches this or whose name or
        # value matches spark.redaction.regex. That catches the JAAS line ("password" in
        # it) but not a PEM key, whose name and text say nothing: cover every secret name.
        "spark.sql.redaction.options.regex": SECRET_OPTIONS_REGEX,
    }


def launcher_defaults(master: str, avro: bool = False) -> dict[str, str]:
    """Settings only the launcher chooses: spark-submit's command line owns these. `avro`:
    resolve Spark's Avro connector too."""
    packages = [KAFKA_CONNECTOR, AVRO_CONNECTOR] if avro else [KAFKA_CONNECTOR]
    return {
        "spark.master": master,
        "spark.app.name": "globalstore-pipeline",
        "spark.jars.packages": ",".join(packages),
        "spark.ui.showConsoleProgress": "false",
        # The Python workers read their warning filters from the environment at start.
        "spark.executorEnv.PYTHONWARNINGS": f"ignore:{PANDAS_3_WARNING}:FutureWarning",
    }


def under_spark_submit() -> bool:
    """True when this process was started by spark-submit."""
    return SUBMIT_ENV in os.environ


def build_session(
    master: str = LOCAL_MASTER,
    shuffle_partitions: int = 4,
    extra: Mapping[str, str] | None = None,
    jvm_log: Path | None = None,
    avro: bool = False,
) -> SparkSession:
    """Return the (shared) SparkSession; `extra` overrides the defaults, spark-submit wins.
    `jvm_log`: a file for the output of the JVM this starts (its package resolution, Spark's
    warnings, the Python workers'), instead of this process's console. `avro`: with Spark's
    Avro connector, which an Avro run needs; it cannot be added to a session once started,
    so pass it if any run in this process reads Avro."""
    warnings.filterwarnings("ignore", PANDAS_3_WARNING, FutureWarning)
    if under_spark_submit():
        return _submitted_session({**sql_defaults(shuffle_partitions), **(extra or {})})
    # Python workers must import pandas/pyarrow from this interpreter's environment, not
    # whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    defaults = {**launcher_defaults(master, avro), **sql_defaults(shuffle_partitions)}
    settings = {**defaults, **(extra or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_log is None:
        return builder.getOrCreate()
    with _output_to(jvm_log):  # the JVM inherits stdout and stderr when it is launched
        return builder.getOrCreate()


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at `path` meanwhile (child processes keep it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _submitted_session(defaults: Mapping[str, str]) -> SparkSession:
    spark = SparkSession.builder.getOrCreate()
    submitted = spark.sparkContext.getConf()  # what spark-submit and spark-defaults set
    for key, value in defaults.items():
        if not submitted.contains(key):
            spark.conf.set(key, value)
    return spark


def require_avro(spark: SparkSession) -> None:
    """ConfigurationError unless the session's JVM has Spark's Avro connector."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session has its gateway
    # from_avro's expression, which only the connector's jar has (Spark 4's core jars have
    # the functions and the file format); py4j gives a JavaPackage for a class not found.
    if not isinstance(getattr(jvm, "org.apache.spark.sql.avro.AvroDataToCatalyst"), JavaClass):
        raise ConfigurationError(
            f"an Avro run needs Spark's Avro connector ({AVRO_CONNECTOR}), and the "
            "SparkSession of this process was started without it (packages are fixed when a "
            "session starts): run it in a new process, build the session with "
            "build_session(avro=True) before any run, or under spark-submit add it to "
            "--packages"
        )
