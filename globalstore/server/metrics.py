"""Prometheus metrics of one served store, in a registry of its own (so two servers in one
process, as in tests, do not collide). Store gauges are read from status() at scrape time."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from globalstore.read.protocols import StoreStatus
from globalstore.server.served import ServedStore
from globalstore.status import Delays

__all__ = ["Metrics", "stopped_by"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class _StoreCollector(Collector):
    def __init__(self, served: ServedStore) -> None:
        self.served = served
        self._baseline: int | None = None  # sum of offsets when this server began applying

    def collect(self) -> Iterator[Metric]:
        status = self.served.store.status()
        progress = self.served.progress()
        yield _gauge(
            "globalstore_ready",
            "1 once restored to the end offsets seen at start (and fresh, with max_staleness)",
            float(status.ready),
        )
        yield _gauge("globalstore_connected", "1 while the broker answers", float(status.connected))
        yield _gauge(
            "globalstore_fresh",
            "1 while the store held the topic's end within max_staleness (now, without one)",
            float(status.fresh),
        )
        failure = stopped_by(self.served, status)
        failed = GaugeMetricFamily(
            "globalstore_failed",
            "1 once the store stopped on an error (of the type named; /v1/status says why)",
            labels=["error"],
        )
        failed.add_metric([failure or ""], float(failure is not None))
        yield failed
        if status.key_count is not None:
            yield _gauge("globalstore_keys", "Live keys in the store", status.key_count)
        if status.staleness_seconds is not None:
            yield _gauge(
                "globalstore_staleness_seconds",
                "Seconds since the store last held the topic's end",
                status.staleness_seconds,
            )
        position = GaugeMetricFamily(
            "globalstore_position", "Next offset applied, per partition", labels=["partition"]
        )
        lag = GaugeMetricFamily(
            "globalstore_lag_records", "Records behind the topic's end", labels=["partition"]
        )
        for p, o in sorted(status.position.items()):
            position.add_metric([str(p)], o)
        for p, n in sorted(status.lag.items()):
            lag.add_metric([str(p)], n)
        yield position
        yield lag
        total = sum(status.position.values())
        if progress.start_offsets_total is not None:
            self._baseline = progress.start_offsets_total
        elif self._baseline is None:
            self._baseline = total  # a store started elsewhere: count from the first scrape
        applied = CounterMetricFamily(
            "globalstore_records_applied",
            "Offsets applied since this server started (records, plus transaction markers)",
        )
        applied.add_metric([], max(0, total - self._baseline))
        yield applied
        yield _gauge(
            "globalstore_restore_records_target",
            "Records the last restore had to read",
            progress.records_to_restore,
        )
        yield _gauge(
            "globalstore_restore_records_done",
            "Records the last restore has read",
            progress.records_restored,
        )
        yield _gauge(
            "globalstore_restore_rate", "Records per second of the last restore", progress.rate
        )
        yield CounterMetricFamily(
            "globalstore_transform_failures",
            "Records the store's transform raised on since this start (their keys kept)",
            value=status.transform_failures,
        )
        yield _gauge(
            "globalstore_quarantined",
            "Keys whose latest record did not decode, held in the quarantine (invalid_values="
            "'quarantine')",
            status.quarantined,
        )
        if status.undecodable is not None:
            yield _gauge(
                "globalstore_undecodable_values",
                "Keys whose latest value does not decode, stored as it came or quarantined "
                "(exact; absent for a store written before it was counted)",
                status.undecodable,
            )
        yield CounterMetricFamily(
            "globalstore_refused_notes",
            "A reader process: datagrams on its socket that were not its writer's note, since "
            "this start (dropped)",
            value=status.refused_notes,
        )
        yield from _progress_metrics(status)
        stages = {"applied": status.record_delays, "visible": status.visible_delays}
        if any(stages.values()):
            yield _delay_histogram(stages)
        yield from _index_metrics(status)
        yield from _ttl_metrics(status)


def _delay_histogram(stages: Mapping[str, Delays | None]) -> Metric:
    """The record delay as a Prometheus histogram per stage that has one (cumulative buckets;
    le="+Inf" is all)."""
    histogram = HistogramMetricFamily(
        "globalstore_record_delay_seconds",
        "Seconds from a record's timestamp to the store applying it (stage applied) or to a "
        "reader process showing it (stage visible), while following (each record of a batch "
        "counted at its batch's oldest record's delay)",
        labels=["stage"],
    )
    for stage, delays in stages.items():
        if delays is None:
            continue
        cumulative, running = [], 0
        for bound, count in zip(delays.bounds, delays.counts, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == math.inf else repr(bound), running))
        histogram.add_metric([stage], cumulative, delays.sum_seconds)
    return histogram


def _progress_metrics(status: StoreStatus) -> Iterator[Metric]:
    """While a restore, a rebuild or a migration runs (label `phase`): what is left, the
    rate over the last few seconds and the ETA at that rate; absent otherwise."""
    progress = status.progress
    if progress is None:
        return
    labels = [progress.phase]
    remaining = GaugeMetricFamily(
        "globalstore_progress_remaining",
        "Offsets a restore or rebuild has left to read (values, a migration)",
        labels=["phase"],
    )
    remaining.add_metric(labels, progress.left)
    rate = GaugeMetricFamily(
        "globalstore_progress_rate",
        "Offsets (values, a migration) a second over the last few seconds",
        labels=["phase"],
    )
    rate.add_metric(labels, progress.rate)
    yield from (remaining, rate)
    if progress.eta_seconds is not None:
        eta = GaugeMetricFamily(
            "globalstore_progress_eta_seconds",
            "Seconds left at the current rate, of the restore, rebuild or migration running",
            labels=["phase"],
        )
        eta.add_metric(labels, progress.eta_seconds)
        yield eta


def _index_metrics(status: StoreStatus) -> Iterator[Metric]:
    """Per secondary index: its entries, whether it is built, its build's progress, and the
    keys its function failed on."""
    labels = ["index"]
    entries = GaugeMetricFamily(
        "globalstore_index_entries", "(key, index value) entries each index holds", labels=labels
    )
    ready = GaugeMetricFamily(
        "globalstore_index_ready", "1 once the index is built (find answers)", labels=labels
    )
    built = GaugeMetricFamily(
        "globalstore_index_build_keys",
        "Keys an index being built has indexed so far (absent once built)",
        labels=labels,
    )
    failures = CounterMetricFamily(
        "globalstore_index_failures",
        "Keys the index function failed on since this start (left out of the index)",
        labels=labels,
    )
    for name, index in status.indexes.items():
        entries.add_metric([name], index.entries)
        ready.add_metric([name], float(index.ready))
        if index.indexed_keys is not None:
            built.add_metric([name], index.indexed_keys)
        failures.add_metric([name], index.failures)
    yield from (entries, ready, built, failures)


def _ttl_metrics(status: StoreStatus) -> Iterator[Metric]:
    """A store with a time to live: its time index's size and the expired keys purged."""
    if status.ttl is None:
        return
    yield _gauge(
        "globalstore_time_index_entries",
        "Keys the time index holds (expired ones not purged yet included)",
        status.ttl.time_index_entries,
    )
    purged = CounterMetricFamily(
        "globalstore_ttl_purged", "Expired keys deleted from disk since this start"
    )
    purged.add_metric([], status.ttl.purged)
    yield purged


def stopped_by(served: ServedStore, status: StoreStatus) -> str | None:
    """The type of the error that stopped the served store: at start (served.error) or
    while following (status.failure); None while it starts or runs."""
    return type(served.error).__name__ if served.error is not None else status.failure


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class Metrics:
    """The registry plus the request instruments the routes update."""

    def __init__(self, served: ServedStore) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StoreCollector(served))
        self.requests = Counter(
            "globalstore_http_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "globalstore_http_request_seconds",
            "Time to build the response (streams: not their transfer), by route",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.waiting = Gauge(
            "globalstore_min_position_waiting",
            "Queries waiting for the store to reach their min_position",
            registry=self.registry,
        )
        self.streams = Gauge(
            "globalstore_http_streams",
            "Export and snapshot streams in flight, by route (each holds a slot)",
            ["route"],
            registry=self.registry,
        )
        self.change_bytes = Gauge(
            "globalstore_change_stream_bytes",
            "Bytes of changes the open /v1/changes streams hold for their clients, about",
            registry=self.registry,
        )
        self.decode_errors = Counter(
            "globalstore_decode_errors",
            "Stored values that do not decode (InvalidValue): a get answered 500, or a page or "
            "an export left them out and said so",
            registry=self.registry,
        )
