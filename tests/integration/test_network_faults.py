"""Network faults between a store and its brokers, made by a real fault injector (Toxiproxy)
in front of each node of a 3-node cluster (tests/proxied_cluster.py), while both ends stay
up: a partition (connections hang, nothing closes) while the store follows with reader
threads, a node unreachable while a store starts, a slow link during a cold restore, and a
partition during a snapshot download from a peer. The figures each test prints are the
ones docs/operations.md gives ("Network faults").

GLOBALSTORE_PARTITION_S sets how long the partition lasts (15 s by default, to keep CI
short; 60 s for a minute's partition)."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from globalstore import GlobalStore, StartTimeout, StoreListener, end_offsets
from tests.integration.serve_support import (
    metric,
    produce_incompressible,
    running_server,
    served_store,
    wait_ready,
)
from tests.integration.store_support import produce, topic_content
from tests.proxied_cluster import ProxiedCluster, proxied_cluster
from tests.waiting import eventually

PARTITION_S = float(os.environ.get("GLOBALSTORE_PARTITION_S", "15"))
NOTICE_S = 10.0  # a partition must show in status() within this
RECOVER_S = 30.0  # and lag must be back to 0 this long after the heal
KEYS = 5_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedCluster]:
    with proxied_cluster(tmp_path_factory.mktemp("faults")) as started:
        yield started


@pytest.fixture(autouse=True)
def healed(cluster: ProxiedCluster) -> Iterator[None]:
    yield
    cluster.heal()


def _batch(rng: random.Random, size: int) -> list[tuple[str, object]]:
    return [(f"k{rng.randrange(KEYS):05d}", {"n": rng.random()}) for _ in range(size)]


@dataclass
class Readers:
    """Threads that `get` random keys as fast as they can, counting reads and failures."""

    store: GlobalStore
    reads: int = 0
    failures: list[BaseException] = field(default_factory=list)
    slowest_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        rng = random.Random()
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.store.get(f"k{rng.randrange(KEYS):05d}")
            except Exception as exc:  # any failure of a read is a finding
                self.failures.append(exc)
            self.slowest_s = max(self.slowest_s, time.monotonic() - began)
            self.reads += 1


@dataclass
class Writer:
    """Produces a batch to the nodes directly (no proxy) every 0.2 s until stopped."""

    bootstrap: str
    topic: str
    batches: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        rng = random.Random(7)
        while not self.stop.wait(0.2):
            produce(self.bootstrap, self.topic, _batch(rng, 500))
            self.batches += 1


def _caught_up(store: GlobalStore, bootstrap: str, topic: str) -> bool:
    ends = end_offsets(bootstrap, topic)
    return all(store.status().position.get(p, 0) >= end for p, end in ends.items())


def test_a_partition_while_following_is_noticed_served_through_and_healed_exactly(
    cluster: ProxiedCluster, tmp_path: Path
) -> None:
    topic = cluster.create_topic(partitions=3)
    produce(cluster.direct, topic, _batch(random.Random(1), 20_000))
    store = GlobalStore(topic, cluster.bootstrap, tmp_path / "s", max_staleness=5.0)
    with store.start(timeout=120):
        readers = Readers(store)
        writer = Writer(cluster.direct, topic)
        threads = [threading.Thread(target=readers.run) for _ in range(3)]
        threads.append(threading.Thread(target=writer.run))
        for thread in threads:
            thread.start()
        try:
            eventually(lambda: store.status().fresh and writer.batches >= 2, 30, store.status)
            reads_before = readers.reads
            cluster.cut()
            cut_at = time.monotonic()
            seen = []  # (seconds since the cut, status)
            while time.monotonic() - cut_at < PARTITION_S:
                seen.append((time.monotonic() - cut_at, store.status()))
                time.sleep(0.2)
            reads_during = readers.reads - reads_before
            cluster.heal()
            healed_at = time.monotonic()
            eventually(lambda: _caught_up(store, cluster.direct, topic), RECOVER_S, store.status)
            recovered_s = time.monotonic() - healed_at
        finally:
            writer.stop.set()
            readers.stop.set()
            for thread in threads:
                thread.join(30)
        eventually(lambda: _caught_up(store, cluster.direct, topic), RECOVER_S, store.status)
        content = dict(store.items())
    disconnected = [t for t, status in seen if not status.connected]
    unready = [t for t, status in seen if not status.ready]
    last = seen[-1][1]
    print(
        f"partition {PARTITION_S:.0f} s: reads during it {reads_during}, slowest read "
        f"{readers.slowest_s * 1000:.1f} ms; connected false after "
        f"{disconnected[0] if disconnected else None} s, not ready after "
        f"{unready[0] if unready else None} s; staleness at the end "
        f"{last.staleness_seconds} s, lag {sum(last.lag.values())}; last_error: "
        f"{last.last_error!r}; lag 0 {recovered_s:.1f} s after the heal; "
        f"{writer.batches} batches written"
    )
    assert not readers.failures, readers.failures[:3]
    assert reads_during > 1000 and readers.slowest_s < 2.0
    assert disconnected and disconnected[0] < NOTICE_S, seen[:: len(seen) // 10 or 1]
    assert all(not status.connected for t, status in seen if t > NOTICE_S)
    assert unready and unready[0] < NOTICE_S
    assert last.staleness_seconds is not None and last.staleness_seconds >= PARTITION_S - 1
    assert last.stale is not None and "max_staleness" in last.stale
    assert recovered_s < RECOVER_S
    assert content == topic_content(cluster.direct, topic)


def test_a_store_starting_while_a_node_is_unreachable_says_what_it_waits_for(
    cluster: ProxiedCluster, tmp_path: Path
) -> None:
    topic = cluster.create_topic(partitions=3)
    produce(cluster.direct, topic, _batch(random.Random(2), 5_000))
    node = cluster.kafka.leader_of(topic, 0)
    cluster.cut([node])  # up for the cluster (it stays leader), unreachable for the store

    began = time.monotonic()
    with pytest.raises(StartTimeout) as failed:
        GlobalStore(topic, cluster.bootstrap, tmp_path / "a").start(timeout=10)
    failed_after = time.monotonic() - began

    store = GlobalStore(topic, cluster.bootstrap, tmp_path / "b").start(timeout=60, wait=False)
    try:
        began = time.monotonic()
        # Named after its first broker request times out (5 s), long before the start's own
        # timeout (60 s); 20 s leaves a loaded machine room (10 s once fell short there).
        eventually(lambda: "waiting for" in (store.status().last_error or ""), 20, store.status)
        named_after, waiting = time.monotonic() - began, store.status()
        cluster.heal()
        healed_at = time.monotonic()
        assert store.wait_until_ready(50)
        ready_after = time.monotonic() - healed_at
        assert dict(store.items()) == topic_content(cluster.direct, topic)
    finally:
        store.close()
    print(
        f"node {node} unreachable: start(timeout=10) raised after {failed_after:.1f} s: "
        f"{failed.value}; a waiting start named it after {named_after:.1f} s "
        f"(state {waiting.state.value}): {waiting.last_error!r}; ready {ready_after:.1f} s "
        "after the heal"
    )
    assert failed_after < 10 + 8  # its timeout, then the thread's last 5 s request
    assert "waiting for" in str(failed.value)  # what it waited for, named
    assert waiting.state.value == "starting"


class _Lag(StoreListener):
    """The restore's progress as a listener sees it: records left after each batch."""

    def __init__(self, ends: dict[int, int]) -> None:
        self.ends = ends
        self.left: list[int] = []

    def on_batch_restored(self, topic, positions, records) -> None:  # type: ignore[no-untyped-def]
        self.left.append(sum(end - positions.get(p, 0) for p, end in self.ends.items()))


def test_a_cold_restore_over_a_slow_link_completes_exactly_and_shows_progress(
    cluster: ProxiedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = cluster.create_topic(partitions=3)
    # 10 MB of values (~8 MB on the wire, lz4): seconds at these rates, so progress shows.
    produce_incompressible(cluster.direct, topic, 5_000, size=2048)
    ends = end_offsets(cluster.direct, topic)
    cluster.slow(latency_ms=200, kilobytes_per_s=1024)
    caplog.set_level(logging.INFO, logger="globalstore")
    progress = _Lag(ends)
    began = time.monotonic()
    with GlobalStore(topic, cluster.bootstrap, tmp_path / "s", listeners=[progress]).start(
        timeout=120
    ) as store:
        restored_s = time.monotonic() - began
        content = dict(store.items())
    lines = [r.getMessage() for r in caplog.records if "records so far" in r.getMessage()]
    print(
        f"cold restore of {sum(ends.values())} records (10 MB) at 200 ms + 1 MB/s per node: "
        f"{restored_s:.1f} s, {len(progress.left)} batches, {len(lines)} progress lines"
    )
    assert content == topic_content(cluster.direct, topic)
    assert progress.left[-1] == 0 and len(progress.left) >= 5
    assert progress.left == sorted(progress.left, reverse=True)
    assert lines, "no progress line in the log"


def test_a_partition_during_a_snapshot_download_falls_back_to_kafka_leaving_nothing(
    cluster: ProxiedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = cluster.create_topic(partitions=2)
    produce_incompressible(cluster.direct, topic, 3_000)  # a 12 MB snapshot
    peer_path, path = tmp_path / "peer", tmp_path / "s"
    with running_server(served_store(topic, cluster.direct, peer_path)) as client:
        wait_ready(client)
        peer = cluster.toxiproxy.proxy("peer", str(client.base_url).removeprefix("http://"))
        # 1 MB/s: the download lasts seconds, long enough to cut it in the middle.
        cluster.toxiproxy.toxic("peer", "bandwidth", "bandwidth", "downstream", rate=1024)
        caplog.set_level(logging.INFO, logger="globalstore")
        url = f"http://{peer}/v1/snapshot"
        started: list[float] = []

        def boot() -> None:
            with GlobalStore(topic, cluster.bootstrap, path, bootstrap_from=url).start(15):
                started.append(time.monotonic())

        booting = threading.Thread(target=boot)
        booting.start()
        try:
            eventually(lambda: _staged(path) > 1 << 20, 30, lambda: _staged(path))
            staged = _staged(path)
            cluster.toxiproxy.hang("peer")
            cut_at = time.monotonic()
            booting.join(60)
        finally:
            cluster.toxiproxy.heal("peer")
        running = 'globalstore_http_streams{route="snapshot"}'
        eventually(lambda: metric(client, running) == 0, 30, lambda: metric(client, running))
        assert not list(peer_path.glob("checkpoint-*")), "the peer kept a checkpoint"
    assert started, "the store did not start"
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    print(
        f"snapshot partition after {staged} bytes: start(15) returned "
        f"{started[0] - cut_at:.1f} s after the cut; {refused}"
    )
    assert any("TimeoutError" in line or "timed out" in line for line in refused), refused
    assert not list(path.glob("snapshot-*")), "staging left behind"
    with GlobalStore(topic, cluster.bootstrap, path).start(60) as store:
        assert dict(store.items()) == topic_content(cluster.direct, topic)


def _staged(path: Path) -> int:
    """Bytes of the snapshot a download has staged in the store's directory so far."""
    return sum(f.stat().st_size for f in path.glob("snapshot-*/**/*") if f.is_file())
