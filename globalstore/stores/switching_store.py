"""SwitchingStore: answer from one store, restore another beside it, switch in one step.

For a topic-to-topic migration (X.v1 -> X.v2, rewritten by the pipeline in a new format): the
application keeps querying the v1 store while the v2 store restores beside it, and every query
moves to v2 at one instant, once v2 holds everything up to the end offsets it saw when it
started (contract 4). Each query runs entirely on one store, so an answer is never empty,
partial or a mix of the two: the active store is read once per call, and a point read that
meets the old store closing is repeated on the new one. The old store is closed only once no
scan is open on it, then its directory is removed if asked.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from globalstore.codec import Entry
from globalstore.errors import StoreClosed
from globalstore.read import arrow
from globalstore.read.changes import DEFAULT_BUFFER, ChangeFeed
from globalstore.read.protocols import ArrowOptions, ScanFilters, ScanOptions, StoreStatus
from globalstore.replicas.live import Live
from globalstore.storage import Storage
from globalstore.storage.quarantine import Quarantined
from globalstore.stores.global_store import GlobalStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SwitchingStore", "remove_store"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class SwitchingStore:
    """The query methods of the active GlobalStore; switch_to() replaces it by another."""

    def __init__(self, active: GlobalStore) -> None:
        self._live = Live(active)  # the swap a self-heal uses too (replicas/live.py)
        self._closed = False
        self.switched_at: float | None = None  # monotonic time of the last switch

    @property
    def active(self) -> GlobalStore:
        """The GlobalStore that answers queries now."""
        return self._live.current

    @property
    def topic(self) -> str:
        """The active store's topic (a switch may change it)."""
        return self._live.current.topic

    @property
    def path(self) -> Path:
        """The active store's directory."""
        return self._live.current.path

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> SwitchingStore:
        """Start the active store (GlobalStore.start), for a server that starts what it
        serves."""
        self._live.current.start(timeout, wait=wait)
        return self

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
        self._live.swap(new)  # returns once no scan is open on the old store
        self.switched_at = time.monotonic()
        # Closed now, not at the next switch as a retired copy would be: it follows its
        # topic until closed, and a read that meets it closed retries on `new` (_on_active).
        old = self._live.take_retired()
        assert old is not None  # the store swap() just retired
        log.info("switched queries from %s to %s", old.path, new.path)
        old.close()
        if remove_old:
            shutil.rmtree(old.path)
            log.info("removed the old store directory %s", old.path)
        return True

    def close(self) -> None:
        """Close the active store and the one a switch retired, if still open."""
        self._closed = True
        self._live.close()

    def __enter__(self) -> SwitchingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries: each runs entirely on one store ------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """As GlobalStore.get, on the active store."""
        return self._on_active(lambda store: store.get(key, default))

    def __getitem__(self, key: str) -> Any:
        return self._on_active(lambda store: store[key])

    def __contains__(self, key: object) -> bool:
        return self._on_active(lambda store: key in store)

    def get_entry(self, key: str) -> Entry | None:
        """As GlobalStore.get_entry, on the active store."""
        return self._on_active(lambda store: store.get_entry(key))

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """As GlobalStore.get_many: every key from one store."""
        wanted = list(keys)
        return self._on_active(lambda store: store.get_many(wanted))

    def count(self) -> int:
        """The active store's live key count."""
        return self._on_active(lambda store: store.count())

    def quarantined(self, after: str | None = None, limit: int | None = None) -> list[Quarantined]:
        """The records the active store did not apply (GlobalStore.quarantined)."""
        return self._on_active(lambda store: store.quarantined(after, limit))

    def position(self) -> dict[int, int]:
        """The active store's position: offsets of ITS topic, which a switch changes."""
        return self._live.current.position()

    def wait_for(
        self, position: Mapping[int, int] | Mapping[str, int], timeout: float | None = None
    ) -> bool:
        """As GlobalStore.wait_for, on the active store: offsets of ITS topic."""
        return self._on_active(lambda store: store.wait_for(position, timeout))

    def checkpoint(self, dest: str | Path) -> None:
        """A checkpoint of the active store into `dest` (GlobalStore.checkpoint)."""
        self._on_active(lambda store: store.checkpoint(dest))

    def status(self) -> StoreStatus:
        """The active store's status."""
        return self._live.current.status()

    def changes(
        self, prefix: str | None = None, keys: Iterable[str] | None = None, *,
        buffer: int = DEFAULT_BUFFER,
    ) -> ChangeFeed:  # fmt: skip
        """The active store's feed (GlobalStore.changes()). A switch closes that store, which
        ends the feed: open one again, on the store switched to, and re-read."""
        return self._on_active(lambda store: store.changes(prefix, keys, buffer=buffer))

    def items(self, **filters: Unpack[ScanOptions]) -> Iterator[tuple[str, Any]]:
        """As GlobalStore.items: one store's view."""
        return self._scan(lambda store: store.items(**filters))

    def keys(self, **filters: Unpack[ScanFilters]) -> Iterator[str]:
        """As GlobalStore.keys: one store's view."""
        return self._scan(lambda store: store.keys(**filters))

    def values(self, **filters: Unpack[ScanOptions]) -> Iterator[Any]:
        """As GlobalStore.values: one store's view."""
        return self._scan(lambda store: store.values(**filters))

    def entries(self, **filters: Unpack[ScanOptions]) -> Iterator[Entry]:
        """As GlobalStore.entries: one store's view."""
        return self._scan(lambda store: store.entries(**filters))

    def find(
        self, index: str, value: str | None = None, **filters: Unpack[ScanOptions]
    ) -> Iterator[tuple[str, Any]]:
        """As GlobalStore.find: one store's view."""
        return self._scan(lambda store: store.find(index, value, **filters))

    def find_matches(
        self,
        index: str,
        value: str | None = None,
        *,
        after: tuple[str, str] | None = None,
        **filters: Unpack[ScanOptions],
    ) -> Iterator[tuple[str, str, Any]]:
        """As GlobalStore.find_matches: one store's view."""
        return self._scan(lambda store: store.find_matches(index, value, after=after, **filters))

    def find_count(self, index: str, value: str) -> int:
        """As GlobalStore.find_count, on the active store."""
        return self._on_active(lambda store: store.find_count(index, value))

    def to_arrow(self, **options: Unpack[ArrowOptions]) -> pa.RecordBatchReader:
        """As GlobalStore.to_arrow: one store's view, held until the reader is read."""
        opened: list[pa.RecordBatchReader] = []

        def open_scan(store: GlobalStore) -> Iterator[pa.RecordBatch]:
            opened.append(store.to_arrow(**options))
            return iter(opened[0])

        batches = self._scan(open_scan)
        return arrow.pyarrow().RecordBatchReader.from_batches(opened[0].schema, batches)

    def _on_active(self, read: Callable[[GlobalStore], _T]) -> _T:
        """`read` on the active store; again on the new one if a switch closed it meanwhile."""
        while True:
            store = self._live.current
            try:
                return read(store)
            except StoreClosed:
                if self._closed or self._live.current is store:
                    raise

    def _scan(self, open_scan: Callable[[GlobalStore], Iterator[_T]]) -> Iterator[_T]:
        """A scan of the active store, which stays open until the scan ends."""
        return self._live.scan(open_scan)


def remove_store(path: str | Path) -> None:
    """Remove a store directory no process holds (StoreLocked if one does); StorageError,
    and nothing removed, if `path` holds no store."""
    Storage(path, read_only=True).close()  # StorageError unless a store is there
    Storage(path).close()  # takes the lock: fails clearly if a process runs the store
    shutil.rmtree(path)
