"""Callbacks a GlobalStore calls from its background thread. Subclass and override what you
need; every method defaults to doing nothing. Keep them quick and do not call back into the
store's lifecycle (start/close) from them: they run on the thread that applies records."""

from __future__ import annotations

from collections.abc import Mapping


class RestoreListener:
    """Progress of a restore."""

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        """Restore begins; end_offsets are what the store must reach to be ready."""

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        """One batch of `records` records was written; positions are next offsets per partition."""

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        """Every partition reached its captured end offset; the store is ready."""
