"""The orders rules of docs/pipelines.md written out a second time, in plain Python.

Nothing here is used by the Spark job: this is the independent expectation that tests and
the demo compare the job's output with. It folds one event at a time, the slow and obvious
way, so that a mistake in the vectorised rules (pipelines.orders.rules) shows up as a
difference instead of being copied.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson

from pipelines.orders.generator import RawRecord

LIFECYCLE = ["CREATED", "PICKED_UP", "IN_TRANSIT", "DELIVERED", "CANCELLED"]
TERMINAL = ("DELIVERED", "CANCELLED")
_ENDED = "ended"


def millis(event_time: str) -> int:
    return round(datetime.fromisoformat(event_time.replace("Z", "+00:00")).timestamp() * 1000)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class ExpectedOrders:
    """Order id -> its current value, or the marker of an order that ended."""

    def __init__(self) -> None:
        self.orders: dict[str, Any] = {}

    def run(self, records: Iterable[RawRecord]) -> ExpectedOrders:
        """Apply the good records (bad ones go to the dead-letter topic); returns self."""
        by_order: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            if record.bad_reason is None:
                event = orjson.loads(record.value)
                by_order[event["order_id"]].append(event)
        for order_id, events in by_order.items():
            # Event-time order. Of events at the same time only the first counts, so put the
            # later lifecycle status first: on a tie it wins.
            events.sort(key=lambda e: (millis(e["event_time"]), -LIFECYCLE.index(e["status"])))
            for event in events:
                self._accept(order_id, event)
        return self

    def _accept(self, order_id: str, event: dict[str, Any]) -> None:
        current = self.orders.get(order_id)
        at = millis(event["event_time"])
        if current == _ENDED or (current is not None and at <= current["_last"]):
            return  # after the end, late or a duplicate: changes nothing
        if event["status"] in TERMINAL:
            self.orders[order_id] = _ENDED
            return
        self.orders[order_id] = {
            "order_id": order_id,
            "courier_id": event["courier_id"],
            "status": event["status"],
            "location": {"lat": float(event["lat"]), "lon": float(event["lon"])},
            "updates": 1 if current is None else current["updates"] + 1,
            "first_seen": iso(at) if current is None else current["first_seen"],
            "last_seen": iso(at),
            "_last": at,
        }

    def active(self) -> dict[str, dict[str, Any]]:
        """The values a store must hold, by order id."""
        return {
            order_id: {k: v for k, v in order.items() if not k.startswith("_")}
            for order_id, order in self.orders.items()
            if order != _ENDED
        }

    def ended(self) -> list[str]:
        """Orders that were delivered or cancelled: no store may hold them."""
        return sorted(order_id for order_id, order in self.orders.items() if order == _ENDED)
