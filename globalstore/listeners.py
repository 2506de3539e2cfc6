"""Callbacks a GlobalStore calls from its background thread. Subclass StoreListener and
override what you need; every method defaults to doing nothing.

They run on the thread that applies records: keep them quick, and do not call the store's
lifecycle (start/close) from them. Queries are fine. An exception raised by a listener stops
the store thread like any other failure (status() shows it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from globalstore.status import State

__all__ = ["StoreListener", "fan_out", "wants_changes"]


class StoreListener:
    """Restore progress, state changes and the keys each applied batch changed."""

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        """Restore begins; end_offsets are what the store must reach to be ready."""

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        """One batch of `records` records was written; positions are next offsets per partition."""

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        """Every partition reached its captured end offset; the store is ready."""

    def on_state_change(self, topic: str, old: State, new: State) -> None:
        """The store moved between created, starting, restoring, running, failed, closed
        (a State is a str: `new == "running"` holds as before)."""

    def on_changes(self, topic: str, upserted: Sequence[str], deleted: Sequence[str]) -> None:
        """A batch was applied (restoring or following): the keys it wrote and deleted, each
        once, in the batch's order. Only called when overridden: building the lists costs
        a little per record."""


def wants_changes(listener: StoreListener) -> bool:
    """True if `listener` overrides on_changes (the store then lists each batch's keys)."""
    return type(listener).on_changes is not StoreListener.on_changes


class _FanOut(StoreListener):
    """Several listeners seen as one, called in the order given."""

    def __init__(self, listeners: Sequence[StoreListener]) -> None:
        self.listeners = tuple(listeners)

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        for listener in self.listeners:
            listener.on_restore_start(topic, start_offsets, end_offsets)

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        for listener in self.listeners:
            listener.on_batch_restored(topic, positions, records)

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        for listener in self.listeners:
            listener.on_restore_end(topic, total_records, seconds)

    def on_state_change(self, topic: str, old: State, new: State) -> None:
        for listener in self.listeners:
            listener.on_state_change(topic, old, new)

    def on_changes(self, topic: str, upserted: Sequence[str], deleted: Sequence[str]) -> None:
        for listener in self.listeners:
            if wants_changes(listener):
                listener.on_changes(topic, upserted, deleted)


def fan_out(listeners: Sequence[StoreListener]) -> StoreListener:
    """One listener that calls each of `listeners`."""
    return listeners[0] if len(listeners) == 1 else _FanOut(listeners)
