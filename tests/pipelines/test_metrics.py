"""The run summary's counts and its stall report, from progress events made here (no Spark)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from pipelines.metrics import SINK_METRICS, RunSummary, SummaryListener


def progress(batch: int, rows: int, trigger_ms: int, **phases_ms: int) -> SimpleNamespace:
    sink = {"dead_lettered": 1, "upserts": 2, "tombstones": 0}
    return SimpleNamespace(
        progress=SimpleNamespace(
            id="q-1",
            batchId=batch,
            numInputRows=rows,
            durationMs={"triggerExecution": trigger_ms, **phases_ms},
            observedMetrics={SINK_METRICS: sink} if rows else {},
        )
    )


def test_a_stalled_trigger_is_one_warning_naming_its_slow_phases(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = SummaryListener("orders:out")
    listener.query_id = "q-1"
    with caplog.at_level(logging.INFO, logger="pipelines"):
        listener.onQueryProgress(progress(3, 10, 800))
        listener.onQueryProgress(progress(4, 0, 63_000, latestOffset=61_900, walCommit=40))
        listener.onQueryProgress(progress(5, 10, 2_500))
    summary = listener.summary
    assert (summary.batches, summary.dead_lettered, summary.upserts) == (2, 2, 4)
    assert summary.slowest_trigger_s == 63.0
    assert "slowest_trigger_s=63.0" in summary.describe()
    [stall] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert stall.startswith("batch 4 stalled: its trigger took 63.0 s (latestOffset 61.9 s)")


def test_summaries_add_their_counts_and_keep_the_slowest_trigger() -> None:
    total = RunSummary(batches=1, clean=5, slowest_trigger_s=9.0)
    total.add(RunSummary(batches=2, clean=1, schema_restarts=1, slowest_trigger_s=4.0))
    assert total == RunSummary(batches=3, clean=6, schema_restarts=1, slowest_trigger_s=9.0)
