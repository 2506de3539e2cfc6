"""OpenTelemetry, with the SDK's in-memory exporters: the metrics /metrics shows, exported
sample for sample through a MeterProvider; a span per HTTP request (a child of the caller's
traceparent); spans of a restore and of a snapshot; nothing at all without the extra."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from globalstore import tracing
from globalstore.config import StoreConfig
from globalstore.follow.delays import RecordDelays
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.follow.thread import StoreThread
from globalstore.server import ServedStore
from globalstore.server.metrics import Metrics
from globalstore.server.otel import MetricsBridge
from globalstore.shaping.migrate import Migration
from globalstore.snapshots import archive
from globalstore.status import Progress, State
from globalstore.storage import Storage
from tests.unit.server.test_probes import ReportingStore, client_for, status
from tests.unit.store_fakes import FakeConsumer, messages

SPANS = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _tracer_provider() -> None:
    """The process's tracer provider (set once: OpenTelemetry allows no second one)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(SPANS))
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    SPANS.clear()
    yield SPANS


def _report() -> Any:
    delays = RecordDelays()
    delays.observe(0.02, 3)
    return dataclasses.replace(
        status(State.RESTORING),
        progress=Progress("restore", 10, 30, 20, 5.0, 4.0, 2.0),
        record_delays=delays.snapshot(),
        undecodable=2,
    )


def test_every_sample_of_the_registry_is_exported_with_its_value() -> None:
    metrics = Metrics(ServedStore.of(ReportingStore(_report())))  # type: ignore[arg-type]
    reader = InMemoryMetricReader()
    MetricsBridge(metrics.registry, MeterProvider(metric_readers=[reader]))
    data = reader.get_metrics_data()
    assert data is not None
    exported = {
        (m.name, tuple(sorted(p.attributes.items())), p.value)  # type: ignore[union-attr]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
    }
    text = generate_latest(metrics.registry).decode()
    shown = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.name.endswith("_created")
    }
    assert shown == exported
    names = {name for name, _, _ in exported}
    assert {"globalstore_progress_eta_seconds", "globalstore_undecodable_values"} <= names
    assert ("globalstore_record_delay_seconds_count", (("stage", "applied"),), 3.0) in exported


def test_a_family_that_appears_later_is_exported_from_then_on() -> None:
    store = ReportingStore(status(State.RUNNING))
    metrics = Metrics(ServedStore.of(store))  # type: ignore[arg-type]
    reader = InMemoryMetricReader()
    bridge = MetricsBridge(metrics.registry, MeterProvider(metric_readers=[reader]))
    assert "globalstore_progress_remaining" not in bridge.declared
    store.report = _report()  # a restore began
    bridge._read_at = -1.0  # the next collection reads the registry again
    reader.get_metrics_data()
    for _ in range(200):  # declared from another thread
        if "globalstore_progress_remaining" in bridge.declared:
            break
        threading.Event().wait(0.01)
    data = reader.get_metrics_data()
    assert data is not None
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "globalstore_progress_remaining" in names


def test_each_request_is_a_server_span_under_the_callers_trace(
    spans: InMemorySpanExporter,
) -> None:
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    for client in client_for(ServedStore.of(ReportingStore(status(State.RUNNING)))):  # type: ignore[arg-type]
        assert client.get("/v1/status", headers={"traceparent": caller}).status_code == 200
        assert client.get("/readyz").status_code == 200
    got = {s.name: s for s in spans.get_finished_spans()}
    span = got["GET /v1/status"]
    assert span.kind is trace.SpanKind.SERVER
    assert span.attributes is not None and span.attributes["http.response.status_code"] == 200
    assert span.attributes["http.route"] == "/v1/status"
    assert span.context.trace_id == int("0af7651916cd43dd8448eb211c80319c", 16)
    assert span.parent is not None and span.parent.span_id == int("b7ad6b7169203331", 16)
    assert "GET /readyz" in got


def test_a_restore_and_a_snapshot_are_spans(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 0)
    storage.load(storage.read_meta())
    config = StoreConfig("t", "f:1", storage.path, poll_timeout=0.005, native_restore=False)

    def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
        migration = Migration(storage, config.value_formats(), "t")
        migration.begin()
        return Prepared(Plan({0: 0}, {0: 2}, True), migration)

    consumer = FakeConsumer("t", {0: messages(("a", "1"), ("b", "2"))})
    thread = StoreThread(config, storage, consumer_factory=lambda _c: consumer, prepare=prepare)
    thread.start()
    assert thread.ready.wait(10)
    thread.stop()
    thread.join()
    storage.close()
    archive.create(tmp_path / "s", tmp_path / "snap")
    got = {s.name: s for s in spans.get_finished_spans()}
    restore = got["globalstore.restore"]
    assert restore.attributes is not None and restore.attributes["globalstore.completed"] is True
    assert restore.attributes["globalstore.offsets_to_read"] == 2
    assert restore.attributes["globalstore.records"] == 2
    assert "globalstore.snapshot.create" in got


def test_a_failed_phase_is_a_failed_span(spans: InMemorySpanExporter) -> None:
    with pytest.raises(OSError), tracing.phase("globalstore.snapshot.install"):
        raise OSError("disk gone")
    [span] = spans.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.events[0].name == "exception"


def test_without_the_extra_a_phase_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "trace", None)
    with tracing.phase("globalstore.restore", {"a": 1}) as span:
        span.end(None, {"b": 2})
    assert span._span is None
