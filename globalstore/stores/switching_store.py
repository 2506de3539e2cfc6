"""SwitchingStore: answer from one store, restore another beside it, switch in one step
(stores/switching.py). The old store is closed only once no scan is open on it, then its
directory is removed if asked."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from globalstore.storage import Storage
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.store import Store
from globalstore.stores.switching import SwitchingSource

__all__ = ["SwitchingStore", "remove_store"]

log = logging.getLogger(__name__)


class SwitchingStore(Store):
    """The queries of the active GlobalStore; switch_to() replaces it by another."""

    def __init__(self, active: GlobalStore) -> None:
        self._stores = SwitchingSource(active)
        super().__init__(self._stores)
        self.switched_at: float | None = None  # monotonic time of the last switch

    @property
    def active(self) -> Store:
        """The store that answers queries now."""
        return self._stores.active

    def switch_to(
        self,
        new: GlobalStore,
        timeout: float | None = None,
        *,
        remove_old: bool = False,
        started: bool = False,
    ) -> bool:
        """Start `new` (not started yet), wait until it has restored, then answer from it.
        Returns False (still answering from the old store; `new` left restoring, to close or
        to pass to a later call with started=True) if it is not ready within `timeout`. The
        old store is closed once its open scans end; with remove_old its directory is removed
        then."""
        if not started:
            new.start(wait=False)
        if not new.wait_until_ready(timeout):
            return False
        stores = self._stores.stores
        stores.swap(new)  # returns once no scan is open on the old store
        self.switched_at = time.monotonic()
        # Closed now, not at the next switch as a retired copy would be: it follows its
        # topic until closed, and a read that meets it closed is repeated on `new` (Store).
        old = stores.take_retired()
        assert old is not None  # the store swap() just retired
        log.info("switched queries from %s to %s", old.path, new.path)
        old.close()
        if remove_old:
            shutil.rmtree(old.path)
            log.info("removed the old store directory %s", old.path)
        return True


def remove_store(path: str | Path) -> None:
    """Remove a store directory no process holds (StoreLocked if one does); StorageError,
    and nothing removed, if `path` holds no store."""
    Storage(path, read_only=True).close()  # StorageError unless a store is there
    Storage(path).close()  # takes the lock: fails clearly if a process runs the store
    shutil.rmtree(path)
