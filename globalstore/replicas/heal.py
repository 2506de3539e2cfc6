"""Replacing the live copy of a store at one instant, and self-healing, which does it.

A Replica is a storage and the thread filling it; `Live` holds the one that answers and
swaps another in at one instant (`swap`, the one operation that does so: a self-heal swaps
replicas here, SwitchingStore swaps whole stores). Readers take `Live.current` once per call;
a scan holds its copy until it ends, and a swap returns only once no scan is open on the
copy it replaced, which the caller may then release.

Self-healing: while following, offsets out of range (topic recreated, records deleted) stop
the store thread (OffsetsOutOfRange). With StoreConfig.out_of_range="rebuild" (the default)
the store's Healer then restores the topic from the beginning into <path>/rebuild, with a
thread of its own, while queries keep answering from the last state; once that copy has
reached its end offsets it is swapped in. Disk for two copies during the rebuild is the price.
A later heal rebuilds into the directory the live copy is not in, so the two places take
turns. At the next start the copy whose restore completed last is kept in <path> and the
other is dropped (`adopt_rebuilt`): a process that opens the store then, a reader on its
files among them, follows the swap by reading <path>.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from globalstore.config import StoreConfig
from globalstore.errors import OffsetsOutOfRange
from globalstore.follow.thread import StoreThread
from globalstore.storage import Storage

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_Item = TypeVar("_Item")

BESIDE = "rebuild"  # the directory, inside the store's, that a rebuild fills
_WATCH_INTERVAL = 0.1  # seconds between two looks at a thread the healer waits on


def adopt_rebuilt(storage: Storage) -> None:
    """At start, with the store's lock held (so no process runs it): keep the copy whose
    restore completed last. A rebuild completed beside the store takes its place; one that
    did not complete, or that a later rebuild in <path> replaced, is dropped. Each step can
    be repeated after a crash: the newer copy stays until it has been moved."""
    beside = storage.path / BESIDE
    if not beside.exists():
        return
    rebuilt = _restored_at(beside)
    if rebuilt is not None and rebuilt > (storage.read_meta().restored_at_ms or -1):
        storage.wipe(lambda path: (beside / "db").rename(path / "db"))
        log.info("store %s: adopted the copy rebuilt beside it", storage.path)
    shutil.rmtree(beside)


def _restored_at(path: Path) -> int | None:
    """When the copy at `path` last completed a restore; None if it never did."""
    if not (path / "db" / "CURRENT").exists():
        return None
    copy = Storage(path, read_only=True)
    try:
        return copy.read_meta().restored_at_ms
    finally:
        copy.close()


@dataclass(frozen=True)
class Replica:
    """A storage and the thread filling it."""

    storage: Storage
    thread: StoreThread
    # RocksDB's own get on the storage (valid until it closes): the point-lookup hot path.
    get: Callable[[bytes], bytes | None] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "get", self.storage.reader())

    def close(self) -> None:
        self.thread.stop()
        if self.thread.is_alive():
            self.thread.join()
        self.storage.close()


class Live(Generic[_T]):
    """The copy that answers now, replaced at one instant by swap()."""

    def __init__(self, first: _T) -> None:
        self.current = first  # read once per call: one reference, replaced whole
        self._scans = {id(first): 0}  # open scans per copy: a swap waits for zero
        self._changed = threading.Condition()

    def swap(self, new: _T) -> _T:
        """Answer from `new` from now on; return the old copy once no scan is open on it."""
        with self._changed:
            old, self.current = self.current, new
            self._scans.setdefault(id(new), 0)
            while self._scans.get(id(old), 0) > 0:
                self._changed.wait()
            self._scans.pop(id(old), None)
        return old

    def scan(self, open_scan: Callable[[_T], Iterator[_Item]]) -> Iterator[_Item]:
        """A scan of the current copy, which stays held until the scan ends."""
        with self._changed:
            copy = self.current
            self._scans[id(copy)] += 1
        try:
            scan = open_scan(copy)  # the point-in-time view is taken here
        except BaseException:
            self._scan_ended(copy)
            raise
        return _HeldScan(scan, functools.partial(self._scan_ended, copy))

    def _scan_ended(self, copy: _T) -> None:
        with self._changed:
            self._scans[id(copy)] -= 1
            self._changed.notify_all()


class _HeldScan(Iterator[_Item]):
    """A scan that holds its copy until it is exhausted, closed or collected."""

    def __init__(self, scan: Iterator[_Item], release: Callable[[], None]) -> None:
        self._scan: Iterator[_Item] | None = scan
        self._release = release

    def __next__(self) -> _Item:
        if self._scan is None:
            raise StopIteration
        try:
            return next(self._scan)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        scan, self._scan = self._scan, None
        if scan is not None:
            getattr(scan, "close", lambda: None)()
            self._release()

    def __del__(self) -> None:
        self.close()


class Healer(threading.Thread):
    """Watches the live replica's thread; when it stops on offsets out of range after it was
    ready, rebuilds a replica beside it and swaps that in. Owns every replica it made and
    the copies they replaced; the store only reads `live`, `rebuilding` and `heals`."""

    def __init__(
        self,
        config: StoreConfig,
        live: Live[Replica],
        make_thread: Callable[[StoreConfig, Storage], StoreThread],
        on_swap: Callable[[], None],
    ) -> None:
        """`make_thread(config, storage)` makes an unstarted thread to fill `storage`;
        `on_swap` only signals (it wakes callers waiting for the store to move on)."""
        super().__init__(name=f"globalstore-heal-{config.topic}", daemon=True)
        self.config, self.live, self.make_thread = config, live, make_thread
        self.on_swap = on_swap
        self.heals = 0  # replicas swapped in since start
        self.rebuilding = False  # a rebuild beside the live copy is under way
        self._retired: list[Storage] = []  # copies replaced, closed with the store
        self._stopped = threading.Event()
        self._rebuild: StoreThread | None = None

    def stop(self) -> None:
        """Stop watching and any rebuild; close what it made. Call join() after."""
        self._stopped.set()
        rebuild = self._rebuild
        if rebuild is not None:
            rebuild.stop()

    def run(self) -> None:
        try:
            while self._needs_heal():
                replica = self._rebuilt()
                if replica is None:
                    return
                self._retired.append(self.live.swap(replica).storage)
                self.heals += 1
                log.warning("store %s: switched to the copy rebuilt beside it", self.config.path)
                self.on_swap()
        finally:
            self.rebuilding = False
            # A point read that took the old copy just before a swap may still be on it:
            # the copies replaced stay open until the store closes.
            self._stopped.wait()
            for storage in self._retired:
                storage.close()

    def _needs_heal(self) -> bool:
        """Wait for the live thread to end: True if it lost its position after being ready."""
        thread = self.live.current.thread
        while thread.is_alive() and not self._stopped.is_set():
            thread.join(_WATCH_INTERVAL)
        status = thread.status
        return (
            not self._stopped.is_set()
            and isinstance(status.error, OffsetsOutOfRange)
            and status.restored_at_ms is not None
        )

    def _rebuilt(self) -> Replica | None:
        """A replica restored from the beginning beside the live one; None if stopped or it
        failed (the live copy then keeps serving its last state)."""
        log.warning(
            "store %s: rebuilding beside the live copy, which keeps serving", self.config.path
        )
        storage = self._storage_beside()
        thread = self._rebuild = self.make_thread(
            dataclasses.replace(self.config, path=storage.path), storage
        )
        self.rebuilding = True
        thread.start()
        while not thread.ready.wait(_WATCH_INTERVAL) and not self._stopped.is_set():
            pass
        self.rebuilding = False
        if self._stopped.is_set() or thread.status.restored_at_ms is None:
            Replica(storage, thread).close()
            log.error(
                "rebuild of %s into %s did not complete: %s",
                self.config.topic,
                storage.path,
                thread.status.last_error,
            )
            return None
        return Replica(storage, thread)

    def _storage_beside(self) -> Storage:
        """An empty store where the live copy is not: <path>/rebuild on the first heal; on
        later ones, the other place, where the copy the last heal retired still sits."""
        home = self.config.path
        live = self.live.current.storage.path
        target = home / BESIDE if live == home else home
        for older in self._retired:
            if older.path == target:
                # Retired a heal ago: every query since has run on the live copy.
                self._retired.remove(older)
                older.wipe()
                return older
        beside = home / BESIDE  # the first heal
        shutil.rmtree(beside, ignore_errors=True)
        return Storage(beside, self.config.rocksdb)
