"""Self-healing: rebuild a running store beside itself when the topic stops holding its
position, keep serving the last complete state meanwhile, and hand over when complete.

While following, offsets out of range (topic recreated, records deleted) stop the store thread
(OffsetsOutOfRange). With StoreConfig.out_of_range="rebuild" (the default) the store then
restores the topic from the beginning into <path>/rebuild, with a thread of its own, while
queries keep answering from the last state; once that copy has reached its end offsets the
store answers from it. Disk for two copies during the rebuild is the price. A later heal
rebuilds into the directory the live copy is not in, so the two places take turns. At the
next start the copy whose restore completed last is kept in <path>; the other is dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from globalstore.config import StoreConfig
from globalstore.listeners import StoreListener
from globalstore.storage import Storage
from globalstore.thread import StoreThread

log = logging.getLogger(__name__)

BESIDE = "rebuild"  # the directory, inside the store's, that a rebuild fills


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


def fresh_beside(config: StoreConfig) -> Storage:
    """An empty store in <path>/rebuild, for the first heal (later ones alternate)."""
    shutil.rmtree(config.path / BESIDE, ignore_errors=True)
    return Storage(config.path / BESIDE, config.rocksdb)


def _restored_at(path: Path) -> int | None:
    """When the copy at `path` last completed a restore; None if it never did."""
    if not (path / "db" / "CURRENT").exists():
        return None
    copy = Storage(path, read_only=True)
    try:
        return copy.read_meta().restored_at_ms
    finally:
        copy.close()


class Rebuild(threading.Thread):
    """Restores the topic into an empty `storage`, then calls on_complete(storage, thread)."""

    def __init__(
        self,
        config: StoreConfig,
        storage: Storage,
        listeners: Sequence[StoreListener],
        on_applied: Callable[[], None],
        on_complete: Callable[[Storage, StoreThread], None],
    ) -> None:
        super().__init__(name=f"globalstore-rebuild-{config.topic}", daemon=True)
        self.config = dataclasses.replace(config, path=storage.path)
        self.storage = storage
        self.listeners, self.on_applied, self.on_complete = listeners, on_applied, on_complete
        self._stopped = threading.Event()
        self._thread: StoreThread | None = None

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.stop()

    def run(self) -> None:
        storage = self.storage
        thread = self._thread = StoreThread(self.config, storage, self.listeners, self.on_applied)
        thread.start()
        while not thread.ready.wait(0.1):
            if self._stopped.is_set():
                thread.stop()
        if self._stopped.is_set() or thread.status.restored_at_ms is None:
            thread.stop()
            thread.join()
            storage.close()
            log.error(
                "rebuild of %s into %s did not complete: %s",
                self.config.topic,
                self.config.path,
                thread.status.last_error,
            )
            return
        self.on_complete(storage, thread)
