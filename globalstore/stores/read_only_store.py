"""ReadOnlyStore: look into a store directory without restoring, following or locking it.

For the shell and for debugging: it opens the RocksDB files in read-only mode, so it works
while an application holds the store, and sees what that store had written when it was
opened. It never talks to Kafka; status() is what the store's own files say. It has no
changes(): what it shows never changes (a SharedStore follows a running writer, and has).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from globalstore import codec
from globalstore.config import RocksDBOptions
from globalstore.converters import ValueFormats, decoder
from globalstore.errors import StoreClosed
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus
from globalstore.read.queries import StoreQueries
from globalstore.read.report import store_status
from globalstore.status import State
from globalstore.storage import Storage

__all__ = ["ReadOnlyStore"]


class ReadOnlyStore(StoreQueries):
    """The query methods of GlobalStore over a store directory as last written.
    StorageError if there is no store at `path`."""

    def __init__(
        self,
        path: str | Path,
        rocksdb: RocksDBOptions | None = None,
        *,
        value_format: int = codec.VALUE_FORMAT_VERSION,
        converters: Mapping[int, Callable[[Any], Any]] | None = None,
    ) -> None:
        """value_format and converters as for GlobalStore: the format queries answer in."""
        self.path = Path(path)
        formats = ValueFormats(value_format, dict(converters or {}))
        self._decode, self._value_format = decoder(formats), formats.current
        storage = Storage(self.path, rocksdb, read_only=True)
        meta = storage.read_meta()
        storage.load(meta)
        self.topic = meta.topic or ""
        self._view: Copy | None = Copy(storage)

    def _copy(self) -> Copy:
        view = self._view
        if view is None:
            raise StoreClosed(f"read-only view of {self.path} is closed")
        return view

    def count(self) -> int:
        """Live keys as last counted; counted here, over the view, when a bulk restore had
        not counted them yet (about a second per million keys)."""
        storage = self._ready_storage()
        count = storage.state.count
        return (
            sum(1 for _ in self.keys()) if count is None else self._unexpired_count(storage, count)
        )

    def position(self) -> dict[int, int]:
        """{partition: next offset applied} in the view the store reads now."""
        return dict(self._ready_storage().state.positions)

    def status(self) -> StoreStatus:
        """Position, key count, layout and last restore as last written; lag and staleness
        are unknown (empty / None); state is "offline"."""
        held = self._ready_storage().state
        return store_status(
            self.topic,
            self.path,
            held,
            state=State.OFFLINE,
            restored=False,
            high={},
            connected=False,
            staleness=lambda lag: None,
            last_error=None,
            migration=None
            if held.migrate_from is None
            else f"layout {held.migrate_from} -> {held.layout}",
        )

    def close(self) -> None:
        """Close the view the store reads; a second call does nothing."""
        self._closed = True
        view, self._view = self._view, None
        if view is not None:
            view.close()

    def __enter__(self) -> ReadOnlyStore:
        return self
