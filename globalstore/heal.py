"""Self-healing: rebuild a running store beside itself when the topic stops holding its
position, keep serving the last complete state meanwhile, and hand over when complete.

While following, offsets out of range (topic recreated, records deleted) stop the store thread
(OffsetsOutOfRange). With StoreConfig.out_of_range="rebuild" (the default) the store then
restores the topic from the beginning into <path>/rebuild, with a thread of its own, while
queries keep answering from the last state; once that copy has reached its end offsets the
store answers from it. Disk for two copies during the rebuild is the price. At the next start
a complete rebuilt copy replaces the old one on disk (promote); an incomplete one is dropped.
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
    """At start, with the store's lock held (so no process runs it): put a rebuild completed
    beside the store in its place (it is newer than the copy it replaced), or drop one that
    did not complete. Each step can be repeated after a crash: the complete copy stays until
    it has been moved."""
    beside = storage.path / BESIDE
    if not beside.exists():
        return
    if _complete(beside):
        storage.wipe(lambda path: (beside / "db").rename(path / "db"))
        log.info("store %s: adopted the copy rebuilt beside it", storage.path)
    shutil.rmtree(beside)


def _complete(path: Path) -> bool:
    if not (path / "db" / "CURRENT").exists():
        return False
    copy = Storage(path, read_only=True)
    try:
        return copy.read_meta().restored_at_ms is not None
    finally:
        copy.close()


class Rebuild(threading.Thread):
    """Restores the topic into <path>/rebuild, then calls on_complete(storage, thread)."""

    def __init__(
        self,
        config: StoreConfig,
        listeners: Sequence[StoreListener],
        on_applied: Callable[[], None],
        on_complete: Callable[[Storage, StoreThread], None],
    ) -> None:
        super().__init__(name=f"globalstore-rebuild-{config.topic}", daemon=True)
        self.config = dataclasses.replace(config, path=config.path / BESIDE)
        self.listeners, self.on_applied, self.on_complete = listeners, on_applied, on_complete
        self._stopped = threading.Event()
        self._thread: StoreThread | None = None

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.stop()

    def run(self) -> None:
        shutil.rmtree(self.config.path, ignore_errors=True)
        storage = Storage(self.config.path, self.config.rocksdb)
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
                "rebuild of %s beside it did not complete: %s",
                self.config.path.parent,
                thread.status.last_error,
            )
            return
        self.on_complete(storage, thread)
