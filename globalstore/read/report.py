"""What status() reports of a store's held state, the same for every face."""

from __future__ import annotations

from collections.abc import Mapping

from globalstore.read.protocols import IndexStatus, TtlStatus
from globalstore.storage import StorageState

__all__ = ["index_statuses", "ttl_status"]


def index_statuses(state: StorageState, failures: Mapping[str, int]) -> dict[str, IndexStatus]:
    """status()'s report of each index held in `state`, with its function's `failures`."""
    return {
        name: IndexStatus(
            ready=d.built,
            version=d.version,
            entries=state.index_entries.get(name, 0),
            indexed_keys=None if d.built else d.scanned,
            failures=failures.get(name, 0),
        )
        for name, d in sorted(state.indexes.items())
    }


def ttl_status(state: StorageState, purged: int = 0) -> TtlStatus | None:
    """status()'s report of the time to live held in `state` (None: it has none)."""
    if state.ttl_ms is None:
        return None
    return TtlStatus(state.ttl_ms / 1000, state.time_entries, state.time_cursor is None, purged)
