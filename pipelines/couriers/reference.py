"""The courier rules of docs/pipelines.md written out a second time, in plain Python.

Like pipelines.orders.reference (which it builds on for the orders' lifecycle), nothing here
is used by the Spark job: it applies one event at a time, in arrival order, so that the
tests and the demo have an independent expectation of the job's compacted output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipelines.orders.generator import RawRecord
from pipelines.orders.reference import LIFECYCLE, ExpectedOrders, good_events, iso, millis


@dataclass
class Courier:
    """The reference's figures for one courier."""

    delivered: int = 0
    cancelled: int = 0
    seen: tuple[int, int, float, float] = (-1, -1, 0.0, 0.0)  # event ms, rank, lat, lon


class ExpectedCouriers:
    """Courier id -> its figures, following the orders' lifecycle event by event."""

    def __init__(self, orders: ExpectedOrders | None = None) -> None:
        self.orders = orders or ExpectedOrders()
        self.couriers: dict[str, Courier] = {}

    def run(self, records: Iterable[RawRecord]) -> ExpectedCouriers:
        """Apply the good records (bad ones go to the dead-letter topic); returns self."""
        for raw in good_events(records):
            self.apply(raw)
        return self

    def apply(self, raw: dict[str, Any]) -> None:
        """Follow one raw order event: the courier's latest position, and its deliveries and
        cancellations once the order ends."""
        outcome = self.orders.apply(raw)
        if outcome == "too_late":
            return
        courier = self.couriers.setdefault(raw["courier_id"], Courier())
        at = (millis(raw["event_time"]), LIFECYCLE.index(raw["status"]))
        courier.seen = max(courier.seen, (*at, float(raw["lat"]), float(raw["lon"])))
        if outcome == "ended" and raw["status"] == "DELIVERED":
            courier.delivered += 1
        elif outcome == "ended":
            courier.cancelled += 1

    def figures(self) -> dict[str, dict[str, Any]]:
        """The values a store must hold, by courier id."""
        active: dict[str, int] = {}
        for order in self.orders.active().values():
            active[order["courier_id"]] = active.get(order["courier_id"], 0) + 1
        return {
            courier_id: {
                "courier_id": courier_id,
                "active_orders": active.get(courier_id, 0),
                "delivered": courier.delivered,
                "cancelled": courier.cancelled,
                "position": {"lat": courier.seen[2], "lon": courier.seen[3]},
                "last_seen": iso(courier.seen[0]),
            }
            for courier_id, courier in self.couriers.items()
        }
