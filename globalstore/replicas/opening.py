"""How a GlobalStore opens its directory at start(): locked first, cleaned of what a killed
process left, filled from a peer's snapshot when asked, then opened."""

from __future__ import annotations

import threading
from pathlib import Path

from globalstore.config import StoreConfig
from globalstore.errors import StoreClosed
from globalstore.shaping.rules import write_rules
from globalstore.snapshots import archive
from globalstore.storage import DirLock, Storage

__all__ = ["open_storage"]


def open_storage(
    config: StoreConfig, bootstrap_from: str | Path | None, timeout: float, closing: threading.Event
) -> Storage:
    """Lock the directory first (then no other process installs into it or runs it), drop
    what a killed process left there, install the snapshot `bootstrap_from` into an empty
    store (within `timeout`, or until `closing` is set) and open the database. The lock is
    released if any of it fails."""
    lock = DirLock(config.path)
    try:
        archive.remove_stale_checkpoints(config.path)  # the lock says none is in use
        if bootstrap_from is not None:
            archive.install(bootstrap_from, config.path, timeout=timeout, cancel=closing)
        if closing.is_set():
            raise StoreClosed(f"store for {config.topic!r} was closed while starting")
        return Storage(config.path, config.rocksdb, lock=lock, rules=write_rules(config))
    except BaseException:
        lock.release()
        raise
