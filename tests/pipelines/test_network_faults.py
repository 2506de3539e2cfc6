"""The stream pipeline through network faults between the Spark job and the broker, made by a
real fault injector (Toxiproxy) in front of a one-node cluster (tests/proxied_cluster.py):
the job's source, sink and admin client reach the broker only through the proxy, while the
test's producer and reads go around it. A partition (connections hang, nothing closes)
while raw events keep arriving, then a heal; then 200 ms of latency each way and a
throttled link. After each, the transformed topic is exact and nothing was written twice.
The figures the test prints are those docs/operations.md gives ("Network faults").

GLOBALSTORE_PARTITION_S sets how long the partition lasts (15 s by default, to keep CI
short; 60 for a minute's partition)."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines import skeleton
from pipelines.metrics import STALL_WARNING_S
from pipelines.orders.generator import RawRecord, StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from pipelines.records import DLQ_REASON_HEADER
from tests.pipelines.kafka_read import compacted_json, read_topic
from tests.proxied_cluster import ProxiedCluster, proxied_cluster
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITION_S = float(os.environ.get("GLOBALSTORE_PARTITION_S", "15"))
CATCH_UP_S = 300.0  # a safety net: a loaded machine is slow, the figure is printed
SHAPE = StreamShape(orders=60, bad_every=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedCluster]:
    with proxied_cluster(tmp_path_factory.mktemp("pipeline-faults"), nodes=1) as started:
        yield started


# Spark, a broker and Toxiproxy on a small shared machine, a partition and a slow link.
@pytest.mark.timeout(900 + PARTITION_S)
def test_stream_run_through_a_partition_and_a_slow_link_is_exact(
    spark: SparkSession,
    cluster: ProxiedCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pipelines")
    run = uuid.uuid4().hex[:8]
    options = skeleton.RunOptions(
        bootstrap_servers=cluster.bootstrap,  # the job goes through the proxy
        source_topic=cluster.create_topic(2, compact=False),
        target_topic=f"faults-current-{run}",
        dead_letter_topic=f"faults-dlq-{run}",
        checkpoint_dir=tmp_path / "checkpoint",
        mode="stream",
        max_offsets_per_trigger=100,
    )
    expected = ExpectedOrders()
    produced: list[RawRecord] = []

    def arrive(seed: int) -> None:
        """A round of raw events, around the proxy: the fault is the job's alone."""
        events = generate(SHAPE, seed=seed, first_order=40 * seed)
        produce(cluster.direct, options.source_topic, events)
        expected.run(events)
        produced.extend(events)

    def exact() -> bool:
        return compacted_json(cluster.direct, options.target_topic) == expected.active()

    def dead_letters() -> list[tuple[bytes, str]]:
        dead = read_topic(cluster.direct, options.dead_letter_topic)
        return sorted((r.value, r.headers[DLQ_REASON_HEADER].decode()) for r in dead)

    def all_dead_letters() -> bool:
        """A batch writes its dead letters after its output: the last may still be on the way."""
        return len(dead_letters()) >= sum(1 for r in produced if r.bad_reason is not None)

    arrive(1)
    started = skeleton.start(spark, ORDERS, options)
    try:
        eventually(exact, CATCH_UP_S, lambda: started.summary, 2.0)

        cluster.cut()
        cut_at = time.monotonic()
        arrive(2)  # while the job cannot reach the broker
        time.sleep(max(0.0, PARTITION_S - (time.monotonic() - cut_at)))
        assert started.query.isActive, started.query.exception()
        cluster.heal()
        healed_at = time.monotonic()
        eventually(exact, CATCH_UP_S, lambda: started.summary, 1.0)
        after_partition_s = time.monotonic() - healed_at

        cluster.slow(latency_ms=200, kilobytes_per_s=64)
        slow_at = time.monotonic()
        arrive(3)
        eventually(exact, CATCH_UP_S, lambda: started.summary, 1.0)
        through_slow_link_s = time.monotonic() - slow_at
        cluster.heal()
        eventually(all_dead_letters, CATCH_UP_S, lambda: started.summary, 1.0)
        assert started.query.isActive, started.query.exception()
    finally:
        cluster.heal()
        summary = started.stop()

    # Nothing written twice: every bad raw record is in the dead letters once (a batch
    # written again would write its dead letters again too), with its reason.
    assert dead_letters() == sorted(
        (r.value, r.bad_reason) for r in produced if r.bad_reason is not None
    )
    # The run said it stalled: the trigger that met the partition waited it out.
    stalls = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    if PARTITION_S > STALL_WARNING_S:
        assert stalls, summary.describe()
    assert summary.slowest_trigger_s >= PARTITION_S * 0.8, summary.describe()
    print(
        f"\npartition {PARTITION_S:.0f} s: exact {after_partition_s:.1f} s after the heal; "
        f"slowest trigger {summary.slowest_trigger_s:.1f} s; stall warnings {stalls}; "
        f"200 ms + 64 kB/s link: a round exact in {through_slow_link_s:.1f} s; "
        f"{summary.describe()}"
    )
