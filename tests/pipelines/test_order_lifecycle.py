"""The orders rules in plain Python: ordering, duplicates, lateness, terminal markers."""

from __future__ import annotations

from pipelines.order_lifecycle import Event, OrderState, apply_events


def ev(status: str, ms: int, courier: str = "c1", lat: float = 1.0) -> Event:
    return Event(courier, status, lat, 2.0, ms)


def test_out_of_order_events_in_one_batch_apply_in_event_time_order() -> None:
    state = apply_events(
        None, [ev("IN_TRANSIT", 30, lat=3.0), ev("CREATED", 10), ev("PICKED_UP", 20)]
    )
    assert state == OrderState("c1", "IN_TRANSIT", 3.0, 2.0, 10, 30, 3)


def test_duplicates_and_late_events_are_not_counted_and_do_not_move_back() -> None:
    first = apply_events(None, [ev("CREATED", 10), ev("IN_TRANSIT", 30, lat=3.0)])
    later = apply_events(first, [ev("IN_TRANSIT", 30, lat=3.0), ev("PICKED_UP", 20, lat=9.0)])
    assert later == first


def test_terminal_event_leaves_a_marker_that_ignores_everything_after() -> None:
    ended = apply_events(None, [ev("CREATED", 10), ev("DELIVERED", 40)])
    assert ended is not None and ended.terminal and ended.status is None
    assert apply_events(ended, [ev("IN_TRANSIT", 30), ev("IN_TRANSIT", 50)]) == ended


def test_on_equal_event_time_the_later_lifecycle_status_wins() -> None:
    state = apply_events(None, [ev("IN_TRANSIT", 10), ev("CANCELLED", 10)])
    assert state is not None and state.terminal and state.updates == 1
