"""A restore's progress, rate and ETA in /v1/status and as metrics, only while one runs."""

from __future__ import annotations

import dataclasses
import math

from globalstore.server import ServedStore
from globalstore.status import Delays, Progress, State
from tests.unit.server.test_probes import ReportingStore, client_for, status

RESTORING = Progress("restore", 400, 1_000, 600, 50.0, 12.0, 8.0)


def test_a_restore_under_way_shows_what_is_left_its_rate_and_eta() -> None:
    report = dataclasses.replace(status(State.RESTORING), progress=RESTORING)
    for client in client_for(ServedStore.of(ReportingStore(report))):  # type: ignore[arg-type]
        shown = client.get("/v1/status").json()["progress"]
        assert shown == dataclasses.asdict(RESTORING)
        metrics = client.get("/metrics").text
        assert 'globalstore_progress_remaining{phase="restore"} 600.0' in metrics
        assert 'globalstore_progress_rate{phase="restore"} 50.0' in metrics
        assert 'globalstore_progress_eta_seconds{phase="restore"} 12.0' in metrics


def test_no_progress_metrics_while_no_job_runs() -> None:
    for client in client_for(ServedStore.of(ReportingStore(status(State.RUNNING)))):  # type: ignore[arg-type]
        assert client.get("/v1/status").json()["progress"] is None
        assert "globalstore_progress" not in client.get("/metrics").text


def test_the_record_delay_is_a_histogram_of_cumulative_buckets() -> None:
    delays = Delays((0.005, 1.0, math.inf), (3, 2, 1), 6, 70.5)
    report = dataclasses.replace(status(State.RUNNING), record_delays=delays)
    for client in client_for(ServedStore.of(ReportingStore(report))):  # type: ignore[arg-type]
        metrics = client.get("/metrics").text
        assert 'globalstore_record_delay_seconds_bucket{le="0.005",stage="applied"} 3.0' in metrics
        assert 'globalstore_record_delay_seconds_bucket{le="1.0",stage="applied"} 5.0' in metrics
        assert 'globalstore_record_delay_seconds_bucket{le="+Inf",stage="applied"} 6.0' in metrics
        assert 'globalstore_record_delay_seconds_count{stage="applied"} 6.0' in metrics
        assert 'globalstore_record_delay_seconds_sum{stage="applied"} 70.5' in metrics


def test_a_reader_process_shows_its_delay_to_visible_beside_the_applied_one() -> None:
    report = dataclasses.replace(
        status(State.RUNNING),
        record_delays=Delays((1.0, math.inf), (4, 0), 4, 0.4),
        visible_delays=Delays((1.0, math.inf), (1, 2), 3, 9.0),
    )
    for client in client_for(ServedStore.of(ReportingStore(report))):  # type: ignore[arg-type]
        metrics = client.get("/metrics").text
        assert 'globalstore_record_delay_seconds_bucket{le="1.0",stage="applied"} 4.0' in metrics
        assert 'globalstore_record_delay_seconds_bucket{le="1.0",stage="visible"} 1.0' in metrics
        assert 'globalstore_record_delay_seconds_count{stage="visible"} 3.0' in metrics
        assert 'globalstore_record_delay_seconds_sum{stage="visible"} 9.0' in metrics
        # One metric family: a single HELP line, whatever the stages.
        assert metrics.count("# HELP globalstore_record_delay_seconds ") == 1


def test_no_delay_histogram_without_a_stage_that_has_one() -> None:
    for client in client_for(ServedStore.of(ReportingStore(status(State.RUNNING)))):  # type: ignore[arg-type]
        assert "globalstore_record_delay_seconds" not in client.get("/metrics").text
