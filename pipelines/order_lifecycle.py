"""The orders pipeline's rules as plain Python: fold one order's events into its state.

Precisely (also in docs/pipelines.md):
- Within one micro-batch an order's events are applied in event_time order; on equal
  event_time the later lifecycle status goes first, so a DELIVERED that shares a timestamp
  with an IN_TRANSIT wins.
- An event is *accepted* only if its event_time is strictly later than the order's
  last_seen. Duplicates (same event_time) and late events (earlier than last_seen) are
  ignored, so nothing moves an order backwards. `updates` counts accepted events.
- first_seen is the event_time of the first accepted event; last_seen of the latest.
- An accepted DELIVERED or CANCELLED event ends the order: its state shrinks to a terminal
  marker that makes every later event for that order be ignored until the marker expires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

STATUSES = ("CREATED", "PICKED_UP", "IN_TRANSIT", "DELIVERED", "CANCELLED")
TERMINAL_STATUSES = frozenset({"DELIVERED", "CANCELLED"})
_RANK = {status: rank for rank, status in enumerate(STATUSES)}


@dataclass(frozen=True)
class Event:
    courier_id: str
    status: str
    lat: float
    lon: float
    event_ms: int


@dataclass(frozen=True)
class OrderState:
    """An active order, or (terminal=True) the marker left after it ended."""

    courier_id: str | None
    status: str | None
    lat: float | None
    lon: float | None
    first_seen: int
    last_seen: int
    updates: int
    terminal: bool = False


def apply_events(state: OrderState | None, events: Iterable[Event]) -> OrderState | None:
    """Return the order's state after `events`; None only if it had none and still has none."""
    for event in sorted(events, key=lambda e: (e.event_ms, -_RANK[e.status])):
        if state is not None and (state.terminal or event.event_ms <= state.last_seen):
            continue
        state = _accept(state, event)
    return state


def _accept(state: OrderState | None, event: Event) -> OrderState:
    first_seen = event.event_ms if state is None else state.first_seen
    updates = 1 if state is None else state.updates + 1
    if event.status in TERMINAL_STATUSES:
        return OrderState(None, None, None, None, first_seen, event.event_ms, updates, True)
    return OrderState(
        event.courier_id, event.status, event.lat, event.lon, first_seen, event.event_ms, updates
    )
