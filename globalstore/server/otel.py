"""OpenTelemetry for a served store (the `otel` extra): the metrics /metrics shows, exported
through an OpenTelemetry MeterProvider, and a span per HTTP request (the store's restore,
rebuild and snapshot phases have theirs in globalstore/tracing.py).

The metrics are read from the same Prometheus registry at each collection, so both exports
always agree: each sample name (a histogram's `_bucket`, `_count` and `_sum` apart, a
counter's `_total`) becomes one asynchronous instrument, cumulative for counters and
histograms, a gauge otherwise, with the sample's labels as attributes.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from prometheus_client import CollectorRegistry
from prometheus_client.samples import Sample

__all__ = ["MetricsBridge", "setup_from_environment"]

log = logging.getLogger(__name__)

_METER = "globalstore"
# One collection calls every instrument's callback within milliseconds: the registry is read
# once for all of them.
_FRESH_S = 0.5
_CUMULATIVE = frozenset({"counter", "histogram"})


class MetricsBridge:
    """Exports every sample of `registry` through `provider` (default: the global one)."""

    def __init__(self, registry: CollectorRegistry, provider: MeterProvider | None = None) -> None:
        self.meter = (provider or metrics.get_meter_provider()).get_meter(_METER)
        self.registry = registry
        self.declared: set[str] = set()
        self._samples: dict[str, list[Sample]] = {}
        self._read_at = -1.0
        self._lock = threading.Lock()
        self._declare(self._read())

    def _read(self) -> list[Any]:
        families = list(self.registry.collect())
        samples: dict[str, list[Sample]] = {}
        for family in families:
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(sample)
        self._samples, self._read_at = samples, time.monotonic()
        return families

    def _declare(self, families: Iterable[Any]) -> None:
        """An instrument for each sample name of `families` that has none yet. Families that
        appear later (a restore's progress, a route's first request) get theirs then, from
        another thread: the SDK must not be handed an instrument while it collects."""
        for family in families:
            cumulative = family.type in _CUMULATIVE
            make = (
                self.meter.create_observable_counter
                if cumulative
                else self.meter.create_observable_gauge
            )
            for name in {s.name for s in family.samples} - self.declared:
                if name.endswith("_created"):
                    continue  # prometheus_client's creation time of a counter: no metric
                self.declared.add(name)
                make(
                    name,
                    callbacks=[functools.partial(self._observe, name)],
                    description=family.documentation,
                )

    def _observe(self, name: str, options: CallbackOptions) -> Iterator[Observation]:
        with self._lock:
            if time.monotonic() - self._read_at > _FRESH_S:
                families = self._read()
                new = {s.name for f in families for s in f.samples} - self.declared
                if new:
                    threading.Thread(target=self._declare, args=(families,), daemon=True).start()
            samples = self._samples.get(name, [])
        for sample in samples:
            yield Observation(sample.value, dict(sample.labels))


def setup_from_environment() -> None:
    """For `serve --otel`: the global tracer and meter providers of the OpenTelemetry SDK,
    exporting by OTLP over HTTP where the standard OTEL_* variables say
    (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...)."""
    from opentelemetry import trace  # noqa: PLC0415 - the SDK only when asked for
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    named = "OTEL_SERVICE_NAME" in os.environ
    resource = Resource.create({} if named else {"service.name": "globalstore"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    metrics.set_meter_provider(SdkMeterProvider(resource=resource, metric_readers=[reader]))
