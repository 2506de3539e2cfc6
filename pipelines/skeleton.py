"""The reusable job: read raw topic -> validate -> dead-letter -> transform -> write.

One streaming query does it all, writing output and dead letters through the same Kafka
sink (a `topic` column picks the topic), so one checkpoint covers both: a restart resumes
the source offsets and the transform's state together. `batch` mode is the same query with
trigger(availableNow=True): each run processes what arrived since the previous one.

An Avro run that can look its schemas up again starts its query anew when a record names a
schema id it does not know (pipelines/avro.py stops that batch before it writes): the
producers' new schema is picked up without losing or dead-lettering a record.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.streaming.query import StreamingQuery

from pipelines import checkpoint, failures
from pipelines.avro import UNKNOWN_SCHEMA_ID, new_schema_id, validate_avro
from pipelines.defaults import TRIGGER_INTERVAL
from pipelines.java_clients import spark_kafka_options
from pipelines.metrics import RunSummary, SummaryListener, observe_clean, observe_sink
from pipelines.records import SINK_COLUMNS, dead_letter_records, output_records
from pipelines.session import require_avro
from pipelines.spec import Pipeline
from pipelines.topics import Admin, ensure_topics
from pipelines.validate import REASON, SOURCE_COLUMNS, validate

log = logging.getLogger(__name__)

Mode = Literal["batch", "stream"]
TERMINATION_REPORT_TIMEOUT_S = 30.0
WAIT_SLICE_S = 1  # how soon a Ctrl-C is acted on while the query runs (whole seconds)


@dataclass(frozen=True)
class RunOptions:
    """Where a run reads and writes, and how (batch or stream), with its client settings."""

    bootstrap_servers: str
    source_topic: str
    target_topic: str
    dead_letter_topic: str
    checkpoint_dir: str | os.PathLike[str]  # or any URI Spark can write (hdfs://, s3a://)
    mode: Mode = "batch"
    trigger_interval: str = TRIGGER_INTERVAL
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None  # cap on records per micro-batch
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    """Kafka client settings with librdkafka's names (security etc.): as they are for the
    admin client, translated for the source and the sink (pipelines/java_clients.py)."""
    avro_schemas: Mapping[int, str] | None = None
    """None: the raw values are JSON. Else they are Avro in the Confluent wire format, and
    this is {schema id: Avro schema (JSON text)} of the ids the run decodes."""
    avro_lookup: Callable[[], Mapping[int, str]] | None = None
    """Looks avro_schemas up again (every version of the raw topic's subject in a registry).
    With it, a record whose schema id is not in avro_schemas makes the run look them up and
    start its query again; without it, that record is a dead letter."""
    avro_absent_ids: frozenset[int] = frozenset()
    """Ids that the lookup did not find: dead letters, with no further lookup."""

    def __post_init__(self) -> None:
        # A setting the Java clients cannot take is refused (ConfigurationError, naming it)
        # before anything connects, not after the admin client has created topics.
        self.spark_kafka_options()

    def spark_kafka_options(self) -> dict[str, str]:
        """The Kafka source's and sink's client options (`kafka.` + Java client setting)."""
        return spark_kafka_options(self.kafka_config, self.bootstrap_servers)

    def failures_in_one_line(self) -> AbstractContextManager[None]:
        """Turns a Spark failure of this run into its cause in one line, secrets masked."""
        secrets = {**self.kafka_config, **self.spark_kafka_options()}
        return failures.in_one_line(self.bootstrap_servers, secrets)


OFFSET_FETCH_ATTEMPTS = 12
"""How often the source asks for offsets before the query fails, a second apart: with the
admin client's 5 s API timeout (java_clients.FAILOVER), a leader may take over a minute to
move, as it could with Java's 60 s and Spark's 3 attempts."""


def build_records(spark: SparkSession, pipeline: Pipeline, options: RunOptions) -> DataFrame:
    """The streaming DataFrame of sink rows (output and dead letters) for this pipeline."""
    reader = (
        spark.readStream.format("kafka")
        .options(**options.spark_kafka_options())
        .option("subscribe", options.source_topic)
        .option("startingOffsets", options.starting_offsets)
        # Records deleted by retention before we read them are gone either way: keep going.
        .option("failOnDataLoss", "false")
        .option("fetchOffset.numRetries", str(OFFSET_FETCH_ATTEMPTS))
    )
    if options.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
    raw = reader.load()
    if options.avro_schemas is None:
        checked = validate(raw, pipeline.fields, pipeline.max_record_bytes)
    else:
        checked = validate_avro(
            raw,
            pipeline.fields,
            pipeline.max_record_bytes,
            options.avro_schemas,
            stop_on_unknown=options.avro_lookup is not None,
            absent_ids=options.avro_absent_ids,
        )
    # Both branches (clean rows to the transform, bad ones to the dead letters) start from
    # one exchange, which Spark then plans once and reuses (ReusedExchange): the source is
    # read and validated once per micro-batch, not once per branch. Each branch's filter
    # and column pruning must not be pushed below the exchange, or the two would differ:
    # its hash partitioning uses every column, and observe() above it stops filters.
    checked = observe_clean(_provenance_for_rejects_only(checked).repartition(*checked.columns))
    clean = checked.where(sf.col(REASON).isNull()).select(*(f.name for f in pipeline.fields))
    transformed = pipeline.transform(clean)
    rejected = checked.where(sf.col(REASON).isNotNull())
    records = output_records(transformed, options.target_topic).unionByName(
        dead_letter_records(rejected, options.dead_letter_topic)
    )
    return observe_sink(records.select(*SINK_COLUMNS), options.target_topic)


def _provenance_for_rejects_only(checked: DataFrame) -> DataFrame:
    """Null the raw record and where it came from on clean rows: only dead letters use them,
    so the exchange then moves a clean row's typed fields without its raw bytes (a batch run
    ~6 % faster, benchmarks/results/history.md, "Pipeline")."""
    rejected = sf.col(REASON).isNotNull()
    return checked.select(
        *(
            sf.when(rejected, sf.col(c)).alias(c) if c in SOURCE_COLUMNS else c
            for c in checked.columns
        )
    )


class PipelineRun:
    """A started pipeline query; `wait()` or `stop()` returns the run's summary."""

    def __init__(
        self,
        spark: SparkSession,
        pipeline: Pipeline,
        query: StreamingQuery,
        listener: SummaryListener,
        options: RunOptions,
    ):
        self._spark = spark
        self._pipeline = pipeline
        self.query = query  # replaced when the query starts again for a new schema
        self._listener = listener
        self.options = options  # as the current query runs (its reader schemas may grow)

    @property
    def summary(self) -> RunSummary:
        """The counts so far (complete once the run has returned from wait or stop)."""
        return self._listener.summary

    def wait(self, timeout_s: int | None = None) -> RunSummary:
        """Block until the query ends (a batch run finishes by itself), re-raising failures."""
        try:
            with self.options.failures_in_one_line():
                finished = self._await(timeout_s)
        except KeyboardInterrupt:  # the query runs on, and its listener waits for stop()
            raise
        except BaseException:  # the query failed: do not leave its listener on the session
            self._spark.streams.removeListener(self._listener)
            raise
        if finished is False:
            raise TimeoutError(f"pipeline query still running after {timeout_s} s")
        return self._finish()

    def stop(self) -> RunSummary:
        """Stop the query and return the run's summary."""
        self.query.stop()
        return self._finish()

    def _await(self, timeout_s: int | None) -> bool:
        """awaitTermination in short slices, a Ctrl-C raising KeyboardInterrupt between
        them. Left to pyspark, a Ctrl-C during the one long awaitTermination ran its SIGINT
        handler inside that py4j call, whose own py4j call (cancelAllJobs) then failed on
        the busy connection: tracebacks on the terminal, and the query's end never reached
        the listener (a 30 s wait in _finish)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with _sigint_noted() as interrupted:
            while not self._await_slice():
                if interrupted.is_set():
                    raise KeyboardInterrupt
                if deadline is not None and time.monotonic() > deadline:
                    return False
        return True

    def _await_slice(self) -> bool:
        """Whether the query has ended, after waiting up to a slice for it; a query that
        stopped for a new schema id is started again instead."""
        try:
            return bool(self.query.awaitTermination(WAIT_SLICE_S))
        except Exception as exc:
            schema_id = new_schema_id(exc)
            if schema_id is None or self.options.avro_lookup is None:
                raise
        self._restart_for(schema_id)
        return False

    def _restart_for(self, schema_id: int) -> None:
        """Look the reader schemas up again and start the query again from its checkpoint:
        the batch that met `schema_id` wrote nothing and runs again, decoding it, or
        dead-lettering its records if the subject does not hold it."""
        assert self.options.avro_lookup is not None
        schemas = dict(self.options.avro_lookup())
        absent = self.options.avro_absent_ids
        if schema_id in schemas:
            log.warning(
                "Avro schema id %d is new to this run: starting the query again with the "
                "subject's %d schemas %s",
                schema_id,
                len(schemas),
                sorted(schemas),
            )
        else:
            absent = absent | {schema_id}
            log.warning(
                "Avro schema id %d is not in the subject: its records go to the dead letters "
                "(%s%d); starting the query again",
                schema_id,
                UNKNOWN_SCHEMA_ID,
                schema_id,
            )
        # The failed query's end must reach the listener before the next query's start, or
        # `terminated` would say the run is over.
        self._listener.terminated.wait(TERMINATION_REPORT_TIMEOUT_S)
        self._listener.terminated.clear()
        self.options = replace(self.options, avro_schemas=schemas, avro_absent_ids=absent)
        self._listener.count_schema_restart()
        self.query = _start_query(self._spark, self._pipeline, self.options, self._listener)

    def _finish(self) -> RunSummary:
        if not self._listener.terminated.wait(TERMINATION_REPORT_TIMEOUT_S):
            # The output is written either way; only the counts may be short.
            log.warning(
                "Spark did not report the query's end within %.0f s: the run summary may "
                "miss its last batches",
                TERMINATION_REPORT_TIMEOUT_S,
            )
        self._spark.streams.removeListener(self._listener)
        summary = self.summary
        log.info("pipeline run finished: %s", summary.describe())
        return summary


@contextmanager
def _sigint_noted() -> Iterator[threading.Event]:
    """While the block runs, SIGINT only sets the event (the handler makes no py4j call and
    raises nothing inside one). Off the main thread, where no handler can be set, the
    event never fires and Ctrl-C is whatever it was."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def start(spark: SparkSession, pipeline: Pipeline, options: RunOptions) -> PipelineRun:
    """Check that the checkpoint belongs to this source, create the run's topics if missing
    and start the job; the handle waits or stops it."""
    if options.avro_schemas is not None:
        require_avro(spark)  # before anything is created or bound
    topics = (options.source_topic, options.target_topic, options.dead_letter_topic)
    checkpoint.bound(
        spark,
        os.fspath(options.checkpoint_dir),
        pipeline,
        Admin(options.bootstrap_servers, options.kafka_config),
        topics,
        lambda: ensure_topics(options.bootstrap_servers, *topics, options.kafka_config),
    )
    # With an event-time watermark Spark follows every data batch that moves it with an
    # empty batch, only to evict state or fire timeouts. The pipelines here do neither
    # (markers are dropped when their bucket next has data), so that batch would only
    # delay the next real one.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    listener = SummaryListener(f"{pipeline.name}:{options.target_topic}")
    spark.streams.addListener(listener)
    try:
        query = _start_query(spark, pipeline, options, listener)
    except BaseException:
        spark.streams.removeListener(listener)
        raise
    return PipelineRun(spark, pipeline, query, listener, options)


def _start_query(
    spark: SparkSession, pipeline: Pipeline, options: RunOptions, listener: SummaryListener
) -> StreamingQuery:
    writer = (
        build_records(spark, pipeline, options)
        .writeStream.format("kafka")
        .queryName(listener.query_name)
        .options(**options.spark_kafka_options())
        .option("checkpointLocation", os.fspath(options.checkpoint_dir))
        .option("includeHeaders", "true")
        .outputMode("append")
    )
    if options.mode == "batch":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=options.trigger_interval)
    with options.failures_in_one_line():
        return writer.start()


def run(spark: SparkSession, pipeline: Pipeline, options: RunOptions) -> RunSummary:
    """Run to completion (batch) or until interrupted (stream); return the counts."""
    started = start(spark, pipeline, options)
    try:
        return started.wait()
    except KeyboardInterrupt:
        return started.stop()
