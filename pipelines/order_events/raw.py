"""The raw order events in Spark, as every job over them takes them: their validation, the
pipeline shape reading them, and the state step that folds them with the lifecycle rules
(a bucket's state row and its step are in bucket.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pipelines.defaults import ORDERS_RAW_TOPIC
from pipelines.order_events.lifecycle import STATUSES
from pipelines.spec import Field, Kind, Pipeline, Rule

DEFAULT_FUTURE_SKEW_MS = 3600 * 1000
"""Events whose event_time is further ahead of the wall clock are dead-lettered."""


def fields(future_skew_ms: int = DEFAULT_FUTURE_SKEW_MS) -> tuple[Field, ...]:
    # current_timestamp() is the micro-batch's start: one instant for all its records.
    """The raw event's fields and the rules each must pass (else a dead letter)."""
    not_future = Rule(
        lambda c: sf.unix_millis(c) <= sf.unix_millis(sf.current_timestamp()) + future_skew_ms,
        "future_timestamp",
    )
    return (
        Field("order_id", Kind.STRING, (Rule(lambda c: sf.length(c) > 0, "empty:order_id"),)),
        Field("courier_id", Kind.STRING),
        Field("status", Kind.STRING, (Rule(lambda c: c.isin(*STATUSES), "unknown_status"),)),
        Field("lat", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 90, "lat_out_of_range"),)),
        Field("lon", Kind.NUMBER, (Rule(lambda c: sf.abs(c) <= 180, "lon_out_of_range"),)),
        Field("event_time", Kind.TIMESTAMP, (not_future,)),
    )


def raw_orders_pipeline(
    name: str,
    transform: Callable[[DataFrame, int], DataFrame],
    retention_ms: int,
    future_skew_ms: int,
) -> Pipeline:
    """Pipeline `name` over the raw order events: their validation, its own topics."""
    return Pipeline(
        name=name,
        fields=fields(future_skew_ms),
        transform=lambda clean: transform(clean, retention_ms),
        source_topic=ORDERS_RAW_TOPIC,
        target_topic=f"{name}.current",
        dead_letter_topic=f"{name}.deadletter",
    )


StateFunction = Callable[[tuple[int], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]


def fold_in_state(
    clean: DataFrame,
    group: Column,
    retention_ms: int,
    function: StateFunction,
    output_schema: str,
    state_schema: str,
) -> DataFrame:
    """Clean order events, as the rules take them (EVENT_COLUMNS), through `function` with
    one state row per `group`; out come the rows it yields (`output_schema`).

    The watermark (newest event time seen - retention) is the rules' horizon: Spark drops
    events older than it before the state function, which drops markers older than it.
    """
    events = clean.withWatermark("event_time", f"{retention_ms} milliseconds").select(
        "event_time", group.alias("group"), "order_id", "courier_id", "status", "lat", "lon",
        sf.unix_millis("event_time").alias("event_ms"),
    )  # fmt: skip
    return events.groupBy("group").applyInPandasWithState(
        function, output_schema, state_schema, "append", GroupStateTimeout.NoTimeout
    )
