"""A temporal join: each order enriched with its customer as the customer was when the
order was placed, from a store that keeps history (docs/store.md, "History").

In a plain loop, beside the running store:

    customers = GlobalStore("customers.current", "127.0.0.1:9092", "state/customers",
                            history=7 * 86400)
    for order in enrich(orders, customers): ...

In a Spark job, over a copy of the store that every executor opens read-only:

    copy = copy_for_spark(customers, "exports/customers")   # a consistent checkpoint
    enriched = enrich_in_spark(orders_df, copy)

An order's time is its "ts" (epoch milliseconds, as Kafka timestamps are); a time older
than the store can answer raises HistoryUnavailable, which names the oldest time it can.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pyspark import SparkFiles
from pyspark.sql import DataFrame, Row

from globalstore import FollowingStore, ReadOnlyStore, StoreReader

__all__ = ["copy_for_spark", "enrich", "enrich_in_spark"]


def _with_customer(order: dict[str, Any], customers: StoreReader) -> dict[str, Any]:
    customer = customers.get(order["customer_id"], as_of=order["ts"] / 1000)
    return {**order, "tier": None if customer is None else customer.get("tier")}


def enrich(orders: Iterable[dict[str, Any]], customers: StoreReader) -> Iterator[dict[str, Any]]:
    """Each order with "tier": its customer's tier at the order's time (None: no customer
    then)."""
    for order in orders:
        yield _with_customer(order, customers)


def copy_for_spark(customers: FollowingStore, dest: str | Path) -> Path:
    """A consistent copy of the running store (one instant, history included) at `dest`,
    laid out as a store directory that ReadOnlyStore opens."""
    Path(dest).mkdir(parents=True)
    customers.checkpoint(Path(dest) / "db")
    return Path(dest)


def enrich_in_spark(orders: DataFrame, copy: Path) -> DataFrame:
    """enrich() as a Spark job: the copy is shipped to every executor with the job's files
    (SparkContext.addFile), and each partition of orders opens it once."""
    spark = orders.sparkSession
    spark.sparkContext.addFile(str(copy), recursive=True)
    name = copy.name

    def partition(rows: Iterable[Row]) -> Iterator[Row]:
        with ReadOnlyStore(SparkFiles.get(name)) as customers:
            for row in rows:
                yield Row(**_with_customer(row.asDict(), customers))

    schema = orders.schema.add("tier", "string")
    return spark.createDataFrame(orders.rdd.mapPartitions(partition), schema=schema)
