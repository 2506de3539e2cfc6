"""Count what each micro-batch did, log it, and add it up into a run summary.

The counts come from Spark's observe() metrics, reported in each query progress event.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, fields
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.listener import StreamingQueryListener

from pipelines.validate import REASON

log = logging.getLogger(__name__)

STALL_WARNING_S = 30.0
"""A trigger that took longer than this is reported: Kafka answered slowly or not at all
(a partition stalls the source's offset requests and fetches, and the sink's sends)."""
CLEAN_METRICS = "clean"
SINK_METRICS = "sink"


@dataclass
class RunSummary:
    """What a pipeline run wrote, counted over its batches."""

    batches: int = 0
    clean: int = 0
    dead_lettered: int = 0
    upserts: int = 0
    tombstones: int = 0
    schema_restarts: int = 0  # the query started again for a schema id new to it
    slowest_trigger_s: float = 0.0  # the longest micro-batch, its waits on Kafka included

    def describe(self) -> str:
        """Every count as name=value, for a log line."""
        return ", ".join(f"{f.name}={_shown(getattr(self, f.name))}" for f in fields(self))

    def add(self, batch: RunSummary) -> None:
        """Add a batch's counts; the slowest trigger is the longer of the two."""
        for f in fields(self):
            if f.name != "slowest_trigger_s":
                setattr(self, f.name, getattr(self, f.name) + getattr(batch, f.name))
        self.slowest_trigger_s = max(self.slowest_trigger_s, batch.slowest_trigger_s)


def _shown(value: float) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def observe_clean(checked: DataFrame) -> DataFrame:
    """Count the clean rows of validate()'s output (REASON null)."""
    return checked.observe(CLEAN_METRICS, _count_if(sf.col(REASON).isNull()).alias("clean"))


def observe_sink(records: DataFrame, target_topic: str) -> DataFrame:
    """`records` with the counts of what goes where, observed for the RunSummary."""
    to_target = sf.col("topic") == target_topic
    return records.observe(
        SINK_METRICS,
        _count_if(~to_target).alias("dead_lettered"),
        _count_if(to_target & sf.col("value").isNotNull()).alias("upserts"),
        _count_if(to_target & sf.col("value").isNull()).alias("tombstones"),
    )


def _count_if(condition: Column) -> Column:
    return sf.sum(sf.when(condition, 1).otherwise(0))


class SummaryListener(StreamingQueryListener):
    """Accumulates the observed metrics of one query (by id) into a RunSummary."""

    def __init__(self, query_name: str) -> None:
        self.query_name = query_name
        self.query_id: str | None = None
        self.summary = RunSummary()
        self.terminated = threading.Event()
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
        """Note the id of the query named `query_name`."""
        # Events of one query arrive in order, so the id is known before its progress.
        if event.name == self.query_name:
            self.query_id = str(event.id)

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
        """Add the observed metrics of the query's batch to the summary (batches without input rows
        left out)."""
        progress = event.progress
        if str(progress.id) != self.query_id:
            return
        trigger_s = _trigger_seconds(progress.batchId, progress.durationMs)
        if progress.numInputRows == 0:
            with self._lock:
                self.summary.add(RunSummary(slowest_trigger_s=trigger_s))
            return
        observed = progress.observedMetrics
        batch = RunSummary(batches=1, slowest_trigger_s=trigger_s)
        if CLEAN_METRICS in observed:
            batch.clean = observed[CLEAN_METRICS]["clean"] or 0
        if SINK_METRICS in observed:
            for name in ("dead_lettered", "upserts", "tombstones"):
                setattr(batch, name, observed[SINK_METRICS][name] or 0)
        with self._lock:
            self.summary.add(batch)
        log.info("batch %s: %s", progress.batchId, batch.describe())

    def count_schema_restart(self) -> None:
        """The run started its query again for a new schema id (PipelineRun)."""
        with self._lock:
            self.summary.schema_restarts += 1

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
        """Nothing: an idle query wrote nothing."""
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
        """Set `terminated` once the query ends: the summary is then complete."""
        # Events arrive asynchronously: this one comes after the query's last progress, so
        # a summary read once it is set is complete.
        if str(event.id) == self.query_id:
            self.terminated.set()


def _trigger_seconds(batch_id: int, durations: dict[str, int]) -> float:
    """How long the trigger took; a warning naming its slow phases past STALL_WARNING_S."""
    seconds = durations.get("triggerExecution", 0) / 1000
    if seconds > STALL_WARNING_S:
        phases = ", ".join(
            f"{name} {ms / 1000:.1f} s"
            for name, ms in sorted(durations.items(), key=lambda item: -item[1])
            if name != "triggerExecution" and ms >= 1000
        )
        log.warning(
            "batch %s stalled: its trigger took %.1f s (%s); Kafka answered slowly or not at all",
            batch_id,
            seconds,
            phases or "no phase over 1 s",
        )
    return seconds
