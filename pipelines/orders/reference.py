"""The orders rules of docs/pipelines.md written out a second time, in plain Python.

Nothing here is used by the Spark job: this is the independent expectation that tests and
the demo compare the job's output with. It applies one event at a time, in arrival order,
the slow and obvious way, so that a mistake in the vectorised rules
(pipelines.order_events.lifecycle) shows up as a difference instead of being copied.
Whatever the micro-batches, the job's compacted output must equal `active()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from pipelines.order_events.lifecycle import DEFAULT_RETENTION_MS
from pipelines.orders.generator import RawRecord

LIFECYCLE = ["CREATED", "PICKED_UP", "IN_TRANSIT", "DELIVERED", "CANCELLED"]
TERMINAL = ("DELIVERED", "CANCELLED")


def millis(event_time: str | int) -> int:
    """Epoch milliseconds of an event_time: epoch millis already, or an ISO-8601 string."""
    if isinstance(event_time, int):
        return event_time
    return round(datetime.fromisoformat(event_time.replace("Z", "+00:00")).timestamp() * 1000)


def iso(ms: int) -> str:
    """Epoch milliseconds as the outputs' ISO-8601 text."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def good_events(records: Iterable[RawRecord]) -> Iterator[dict[str, Any]]:
    """The decoded events of the records the pipeline accepts, in arrival order."""
    return (orjson.loads(record.value) for record in records if record.bad_reason is None)


Outcome = Literal["applied", "ended", "after_end", "too_late"]
"""What an event did: joined its active order, ended it, or was ignored (why)."""

Event = tuple[int, int, str, float, float]  # event ms, lifecycle rank, courier, lat, lon


@dataclass
class Order:
    """The reference's view of one order: its distinct events."""

    events: set[Event] = field(default_factory=set)  # distinct: duplicates count once

    def value(self, order_id: str) -> dict[str, Any]:
        """The value the store should hold for the order: status and location of its latest event,
        its distinct event count, first and last seen times."""
        at, rank, courier, lat, lon = max(self.events)  # latest; ties: the rule's order
        return {
            "order_id": order_id,
            "courier_id": courier,
            "status": LIFECYCLE[rank],
            "location": {"lat": lat, "lon": lon},
            "updates": len(self.events),
            "first_seen": iso(min(self.events)[0]),
            "last_seen": iso(at),
        }


class ExpectedOrders:
    """Order id -> its distinct events while active; ended orders -> their marker time."""

    def __init__(self, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.retention_ms = retention_ms
        self.orders: dict[str, Order] = {}
        self.markers: dict[str, int] = {}
        self.clock: int | None = None  # the latest event time seen

    def run(self, records: Iterable[RawRecord]) -> ExpectedOrders:
        """Apply the good records (bad ones go to the dead-letter topic); returns self."""
        for raw in good_events(records):
            self.apply(raw)
        return self

    def apply(self, raw: dict[str, Any]) -> Outcome:
        """Apply one good event; say what it did to its order."""
        order_id, at = raw["order_id"], millis(raw["event_time"])
        horizon = None if self.clock is None else self.clock - self.retention_ms
        self.clock = at if self.clock is None else max(self.clock, at)
        if horizon is not None:
            if at < horizon:
                return "too_late"  # older than the retention allows
            if self.markers.get(order_id, horizon) < horizon:
                del self.markers[order_id]  # the marker is forgotten
        if order_id in self.markers:
            return "after_end"  # the order ended: nothing brings it back
        order = self.orders.setdefault(order_id, Order())
        rank = LIFECYCLE.index(raw["status"])
        order.events.add((at, rank, raw["courier_id"], float(raw["lat"]), float(raw["lon"])))
        if raw["status"] not in TERMINAL:
            return "applied"
        self.markers[order_id] = max(order.events)[0]
        del self.orders[order_id]
        return "ended"

    def active(self) -> dict[str, dict[str, Any]]:
        """The values a store must hold, by order id."""
        return {order_id: order.value(order_id) for order_id, order in self.orders.items()}

    def ended(self) -> list[str]:
        """Orders that were delivered or cancelled (and not yet forgotten): no store holds them."""
        return sorted(self.markers)
