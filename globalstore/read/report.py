"""status() of every face, built in one place: what the held state says (position, lag,
count, layout, last restore, indexes, ttl, history) and the freshness rule; each face adds
its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from globalstore import codec
from globalstore.read.protocols import (
    HistoryStatus,
    IndexStatus,
    StoreStatus,
    TtlStatus,
    behind,
    freshness,
)
from globalstore.shaping.history import horizon_ms
from globalstore.status import State
from globalstore.storage import StorageState

__all__ = ["history_status", "index_statuses", "store_status", "ttl_status"]


def store_status(
    topic: str,
    path: str | Path,
    held: StorageState | None,
    *,
    state: State,
    restored: bool,
    high: Mapping[int, int],
    connected: bool,
    staleness: Callable[[Mapping[int, int]], float | None],
    max_staleness: float | None = None,
    failures: Mapping[str, int] | None = None,
    purged: int = 0,
    **more: Any,
) -> StoreStatus:
    """The status of a face whose copy holds `held` (None: none open), restored or not, that
    knows the topic's end as `high`; `staleness(lag)` says how long since it last held that
    end. A restored store past `max_staleness` is not ready and says why (`stale`). `more`
    are the face's own fields (last_error, rebuild_reason, ...)."""
    position = {} if held is None else dict(sorted(held.positions.items()))
    lag = behind(high, position)
    since = staleness(lag)
    fresh, stale = freshness(since, connected, lag, max_staleness)
    stale = stale if restored else None
    return StoreStatus(
        topic=topic,
        path=str(path),
        state=state,
        ready=restored and stale is None,
        position=position,
        lag=lag,
        key_count=None if held is None else held.count,
        layout_version=codec.LAYOUT_VERSION if held is None or held.layout is None else held.layout,
        last_restore_at=None if held is None else _seconds(held.restored_at_ms),
        connected=connected,
        staleness_seconds=since,
        fresh=fresh,
        stale=stale,
        indexes={} if held is None else index_statuses(held, failures or {}),
        ttl=None if held is None else ttl_status(held, purged),
        history=None if held is None else history_status(held),
        quarantined=0 if held is None else held.quarantined,
        undecodable=None if held is None else held.undecodable,
        **more,
    )


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


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


def history_status(state: StorageState) -> HistoryStatus | None:
    """status()'s report of the history held in `state` (None: it keeps none)."""
    if state.history_ms is None:
        return None
    oldest = horizon_ms(state.history_ms, state.history_from_ms)
    return HistoryStatus(state.history_ms / 1000, oldest / 1000, _seconds(state.history_from_ms))
