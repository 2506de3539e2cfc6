"""Pipelines runnable by name (`globalstore pipeline run NAME`)."""

from __future__ import annotations

from pipelines.couriers.transform import COURIERS
from pipelines.orders.transform import ORDERS
from pipelines.spec import Pipeline

PIPELINES: dict[str, Pipeline] = {pipeline.name: pipeline for pipeline in (ORDERS, COURIERS)}


def get_pipeline(name: str) -> Pipeline:
    """The pipeline called `name`, or a KeyError naming the known ones."""
    try:
        return PIPELINES[name]
    except KeyError:
        known = ", ".join(sorted(PIPELINES))
        raise KeyError(f"unknown pipeline {name!r}; known pipelines: {known}") from None
