"""examples/temporal_join.py run for real: customers' versions on a real broker, a store with
history following them, and orders enriched with the customer's tier at each order's time,
in the plain loop and in a local Spark job over a checkpoint of the store. Both must give
the tier a replay of the produced versions gives."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

from examples.temporal_join import copy_for_spark, enrich, enrich_in_spark
from globalstore import GlobalStore, end_offsets
from tests.conftest import TopicFactory
from tests.integration.store_support import producer

CUSTOMERS, VERSIONS, ORDERS = 20, 6, 300
TIERS = ("bronze", "silver", "gold")


def _versions(start_ms: int) -> list[tuple[str, str | None, int]]:
    """(customer id, tier or None for a deletion, timestamp ms): each customer's versions a
    second apart, some deleted and written again."""
    rng = random.Random(7)
    out = []
    for c in range(CUSTOMERS):
        for v in range(VERSIONS):
            tier = None if rng.random() < 0.15 else rng.choice(TIERS)
            out.append((f"c-{c}", tier, start_ms + 1_000 * v + c))
    return out


def _replay(versions: list[tuple[str, str | None, int]], customer: str, ts: int) -> str | None:
    """The tier the customer had at ts: of its versions at or before ts, the last written."""
    then = [tier for c, tier, at in versions if c == customer and at <= ts]
    return then[-1] if then else None


def _orders(start_ms: int) -> list[dict[str, Any]]:
    rng = random.Random(11)
    span = 1_000 * VERSIONS
    return [
        {"order_id": f"o-{i}", "customer_id": f"c-{rng.randrange(CUSTOMERS)}",
         "ts": start_ms + rng.randrange(span)}
        for i in range(ORDERS)
    ]  # fmt: skip


def test_orders_are_enriched_with_the_customer_as_of_each_orders_time(
    kafka_bootstrap: str, make_topic: TopicFactory, spark: SparkSession, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "customers", history=3600) as customers:
        # After the store began: a store answers from its own start (the horizon).
        start_ms = int(time.time() * 1000) + 1_000
        versions = _versions(start_ms)
        p = producer(kafka_bootstrap)
        for customer, tier, ts in versions:
            value = None if tier is None else orjson.dumps({"tier": tier})
            p.produce(topic, key=customer.encode(), value=value, timestamp=ts)
        assert p.flush(30) == 0
        assert customers.wait_for(end_offsets(kafka_bootstrap, topic), timeout=30)

        orders = _orders(start_ms)
        want = [_replay(versions, o["customer_id"], o["ts"]) for o in orders]
        assert len(set(want)) == len(TIERS) + 1  # every tier, and customers absent then

        assert [o["tier"] for o in enrich(orders, customers)] == want
        copy = copy_for_spark(customers, tmp_path / "customers-copy")

    frame = spark.createDataFrame(orders, schema="order_id string, customer_id string, ts long")
    rows = enrich_in_spark(frame, copy).collect()
    assert {r.order_id: r.tier for r in rows} == {
        o["order_id"]: tier for o, tier in zip(orders, want, strict=True)
    }
