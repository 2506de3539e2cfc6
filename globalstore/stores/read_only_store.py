"""ReadOnlyStore: look into a store directory without restoring, following or locking it
(stores/files.py). For the shell and for debugging; status() is what the store's own files
say, and changes() is refused: what it shows never changes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from globalstore import codec
from globalstore.config import IndexFn, RocksDBOptions, function_indexes
from globalstore.converters import ValueFormats
from globalstore.stores.files import FilesSource
from globalstore.stores.store import Store

__all__ = ["ReadOnlyStore"]


class ReadOnlyStore(Store):
    """The query methods of GlobalStore over a store directory as last written.
    StorageError if there is no store at `path`."""

    def __init__(
        self,
        path: str | Path,
        rocksdb: RocksDBOptions | None = None,
        *,
        value_format: int = codec.VALUE_FORMAT_VERSION,
        converters: Mapping[int, Callable[[Any], Any]] | None = None,
        indexes: Mapping[str, IndexFn | str] | None = None,
    ) -> None:
        """value_format and converters as for GlobalStore: the format queries answer in;
        `indexes` the writer's, for the reads of its function indexes as of a time (as for
        SharedStore)."""
        formats = ValueFormats(value_format, dict(converters or {}))
        fns = function_indexes(indexes or {})
        super().__init__(FilesSource(Path(path), rocksdb, formats, fns))
