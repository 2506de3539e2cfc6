"""Self-healing: a store's replica rebuilt beside the live one and swapped in.

A Replica is a copy of the store (read/copy.py) and the thread filling it; the store's
`Live` (live.py) holds the one that answers. While following, offsets out of range (topic
recreated, records deleted) stop the store thread (OffsetsOutOfRange). With
StoreConfig.out_of_range="rebuild" (the default) the store's Healer then restores the topic
from the beginning into <path>/rebuild, with a thread of its own, while queries keep
answering from the last state; once that copy has reached its end offsets it is swapped in.
Disk for two copies during the rebuild is the price. A later heal rebuilds into the
directory the live copy is not in, so the two places take turns. At the next start the copy
whose restore completed last is kept in <path> and the other is dropped (`adopt_rebuilt`): a
process that opens the store then, a reader on its files among them, follows the swap by
reading <path>.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from globalstore.config import StoreConfig, function_indexes
from globalstore.errors import OffsetsOutOfRange
from globalstore.follow.thread import StoreThread
from globalstore.read.copy import Copy
from globalstore.replicas.announce import WriterNote
from globalstore.replicas.live import Live
from globalstore.shaping.rules import write_rules
from globalstore.status import Progress
from globalstore.storage import Storage

__all__ = ["BESIDE", "Healer", "Replica", "adopt_rebuilt"]

log = logging.getLogger(__name__)

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


class Replica(Copy):
    """A copy of the store and the thread filling it."""

    def __init__(self, storage: Storage, thread: StoreThread) -> None:
        config = thread.config
        super().__init__(
            storage,
            config.value_formats(),
            config.topic,
            config.value_cache,
            function_indexes(config.indexes),
        )
        self.thread = thread

    def note(self, writer: str, home: Path) -> WriterNote:
        """What the reader processes are told of this copy of the store at `home`
        (announce.py): of one instant."""
        status = self.thread.status
        return WriterNote(
            writer=writer,
            live=os.path.relpath(self.storage.path, home),
            state=status.state.value,
            ready=status.restored_at_ms is not None,
            positions=dict(self.storage.state.positions),
            high=dict(status.high),
            sent_at=time.time(),
            applied=self.thread.recent_batches,
        )

    def close(self) -> None:
        """Stop the thread, wait for it to end, then close the storage."""
        self.thread.stop()
        if self.thread.is_alive():
            self.thread.join()
        self.storage.close()


class Healer(threading.Thread):
    """Watches the live replica's thread; when it stops on offsets out of range after it was
    ready, rebuilds a replica beside it and swaps that in (`live` closes what it retires);
    the store only reads `live`, `rebuilding` and `heals`."""

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
        self._stopped = threading.Event()
        self._rebuild: StoreThread | None = None

    @property
    def progress(self) -> Progress | None:
        """How far the rebuild under way is (None: none is)."""
        rebuild = self._rebuild
        progress = None if rebuild is None or not self.rebuilding else rebuild.status.progress
        return None if progress is None else dataclasses.replace(progress, phase="rebuild")

    def stop(self) -> None:
        """Stop watching and any rebuild (closing it). Call join() after."""
        self._stopped.set()
        rebuild = self._rebuild
        if rebuild is not None:
            rebuild.stop()

    def run(self) -> None:
        """Each time the live thread loses its position after being ready, rebuild a replica beside
        it and swap it in; ends when stopped or a rebuild fails."""
        try:
            while self._needs_heal():
                replica = self._rebuilt()
                if replica is None:
                    return
                self.live.swap(replica)
                self.heals += 1
                log.warning("store %s: switched to the copy rebuilt beside it", self.config.path)
                self.on_swap()
        finally:
            self.rebuilding = False

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
        older = self.live.take_retired()
        if older is not None:
            # Retired by the last heal, in the place the live copy is not; its thread had
            # ended (_needs_heal), and every query since has run on the live copy.
            older.storage.wipe()
            return older.storage
        beside = self.config.path / BESIDE  # the first heal
        shutil.rmtree(beside, ignore_errors=True)
        return Storage(beside, self.config.rocksdb, rules=write_rules(self.config))
