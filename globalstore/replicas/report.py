"""GlobalStore.status(): what its live replica, the thread filling it and its healer say."""

from __future__ import annotations

from pathlib import Path

from globalstore.follow.thread import ThreadStatus
from globalstore.read.protocols import StoreStatus
from globalstore.read.report import store_status
from globalstore.replicas.heal import Healer, Replica
from globalstore.status import State

__all__ = ["replica_status"]


def replica_status(
    topic: str,
    path: Path,
    replica: Replica | None,
    healer: Healer | None,
    max_staleness: float | None,
) -> StoreStatus:
    """The status of a store whose live copy is `replica` (None: not started or closed)."""
    t = ThreadStatus(state=State.CLOSED) if replica is None else replica.thread.status
    indexer = None if replica is None else replica.storage.indexes.indexer
    state = State.REBUILDING if healer is not None and healer.rebuilding else t.state
    return store_status(
        topic,
        path if replica is None else replica.storage.path,
        # position, count and layout from one state, so the report is of one instant
        None if replica is None else replica.storage.state,
        state=state,
        restored=t.state is State.RUNNING,
        high=t.high,
        connected=t.connected,
        staleness=t.staleness,
        max_staleness=max_staleness,
        failures=None if indexer is None else indexer.failures,
        purged=t.purged,
        last_error=t.last_error,
        rebuild_reason=t.rebuild_reason,
        skipped_records=t.skipped_records,
        migration=t.migration,
        migrated_values=t.migrated_values,
        conversion_failures=t.conversion_failures,
        transform_failures=t.transform_failures,
        self_heals=0 if healer is None else healer.heals,
        failure=_failure(state, t.error),
    )


def _failure(state: State, error: BaseException | None) -> str | None:
    """The type of the error that stopped the store, while it is reported failed."""
    return type(error).__name__ if state is State.FAILED and error is not None else None
