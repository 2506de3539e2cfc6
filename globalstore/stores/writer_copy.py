"""The copy a SharedStore reads: a RocksDB secondary instance on the copy its writer calls
live, opened and loaded so queries can answer from it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from globalstore.config import IndexFn, RocksDBOptions, ValueCache
from globalstore.converters import ValueFormats
from globalstore.read.copy import Copy
from globalstore.replicas.announce import WriterNote
from globalstore.storage import Storage

__all__ = ["WriterCopy"]


class WriterCopy(Copy):
    """A secondary instance on one writer's live copy."""

    def __init__(
        self,
        storage: Storage,
        formats: ValueFormats,
        writer: str,
        live: str,
        topic: str,
        cache: ValueCache | None = None,
        index_fns: Mapping[str, IndexFn] | None = None,
    ) -> None:
        """`writer` and `live` as the writer's note names them; `topic` as the copy says.
        A `cache` is emptied at each catch-up: which keys the writer wrote is not known here.
        `index_fns` as for Copy."""
        super().__init__(storage, formats, topic, cache, index_fns)
        self.writer, self.live = writer, live

    @classmethod
    def open(
        cls,
        path: Path,
        note: WriterNote,
        rocksdb: RocksDBOptions | None,
        formats: ValueFormats,
        work: Path,
        cache: ValueCache | None = None,
        index_fns: Mapping[str, IndexFn] | None = None,
    ) -> WriterCopy:
        """Open the copy `note` calls live in the store at `path`, the secondary instance's
        own files in `work`, and load its state."""
        storage = Storage(path / note.live, rocksdb, secondary=work)
        try:
            meta = storage.read_meta()
        except BaseException:
            storage.close()
            raise
        storage.load(meta)
        return cls(storage, formats, note.writer, note.live, meta.topic or "", cache, index_fns)
