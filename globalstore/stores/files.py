"""The source of a store read from its directory's files, without restoring, following or
locking it: RocksDB in read-only mode, so it works while an application holds the store, and
sees what that store had written when it was opened. It never talks to Kafka."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from globalstore.config import IndexFn, RocksDBOptions
from globalstore.converters import ValueFormats
from globalstore.errors import ConfigurationError, GlobalStoreError, StorageError, StoreClosed
from globalstore.read.changes import ChangeFeed
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus, check_partitions, reaches
from globalstore.read.report import store_status
from globalstore.status import State
from globalstore.storage import Storage
from globalstore.waiting import Published, Wait

__all__ = ["FilesSource"]

_T = TypeVar("_T")


class FilesSource:
    """One read-only copy of a store directory, open from construction until close()."""

    def __init__(
        self,
        path: Path,
        rocksdb: RocksDBOptions | None,
        formats: ValueFormats,
        index_fns: Mapping[str, IndexFn] | None = None,
    ) -> None:
        """StorageError if there is no store at `path`; `index_fns` as for Copy."""
        self.path = path
        self.formats = formats
        storage = Storage(path, rocksdb, read_only=True)
        meta = storage.read_meta()
        storage.load(meta)
        self.topic = meta.topic or ""
        self._view: Copy | None = Copy(storage, formats, self.topic, None, index_fns)
        self._published = Published()  # notified by nothing: what the files hold never changes

    def copy(self) -> Copy:
        """The view opened at construction; StoreClosed after close()."""
        view = self._view
        if view is None:
            raise StoreClosed(f"read-only view of {self.path} is closed")
        return view

    def serving(self) -> Copy | None:
        """The view, None once closed."""
        return self._view

    def scan(self, open_scan: Callable[[Copy], Iterator[_T]]) -> Iterator[_T]:
        """A scan of the view (nothing replaces it)."""
        return open_scan(self.copy())

    def begin(self, timeout: float) -> None:
        """Nothing to start: the view was opened with the source."""
        self.copy()

    def ready_wait(self) -> Wait:
        """Reached at once while open."""
        return Wait(self._published, lambda: self.copy() is not None)

    def abort(self) -> None:
        """Nothing to release."""

    def gave_up(self, timeout: float) -> GlobalStoreError:
        """Never asked: the view is ready at once."""
        return StoreClosed(f"read-only view of {self.path} is closed")

    def started(self) -> bool:
        """True: open from construction."""
        return True

    def close(self) -> None:
        """Close the view; a second call does nothing."""
        view, self._view = self._view, None
        if view is not None:
            view.close()

    def position(self) -> dict[int, int]:
        """{partition: next offset applied} as last written."""
        return dict(self.copy().storage.state.positions)

    def lag(self) -> dict[int, int]:
        """Unknown: the files do not know the topic's end ({})."""
        return {}

    def position_wait(self, wanted: Mapping[int, int]) -> Wait:
        """Reached only if the files already hold `wanted`: they never move."""

        def check() -> None:
            check_partitions(wanted, self.position().keys(), self.topic)

        return Wait(self._published, lambda: reaches(self.position(), wanted), check)

    def count_wait(self) -> None:
        """None: a count not stored is made over a scan."""
        return None

    def status(self) -> StoreStatus:
        """Position, key count, layout and last restore as last written; lag and staleness
        are unknown (empty / None); state is "offline"."""
        held = self.copy().storage.state
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

    def checkpoint(self, dest: Path) -> None:
        """Refused: take a checkpoint from the process that writes the store."""
        raise StorageError(
            f"a read-only view of {self.path} takes no checkpoint: take it from the store's "
            "writer (GlobalStore.checkpoint, or GET /v1/snapshot of the process that writes)"
        )

    def open_feed(self, prefix: str | None, keys: Iterable[str] | None, buffer: int) -> ChangeFeed:
        """Refused: what a read-only view shows never changes."""
        raise ConfigurationError(
            f"a read-only view of {self.path} has no changes: what it shows never changes "
            "(a SharedStore follows a running writer, and has)"
        )

    def end_feeds(self) -> None:
        """Nothing to end: a read-only view has no feeds."""
