"""What a store is over: its source. The faces differ only in where their data comes from, so
that is all a source says: where the copy that answers now comes from, how start and stop go,
where position, the topic's end and freshness come from, and where changes come from. Store
and AsyncStore (stores/store.py, aio.py) are written once over it.

The sources (stores/): in_process.py (a follower in this process), secondary.py (another
process's writer, read as a RocksDB secondary), files.py (a store directory, read-only),
switching.py (one store, then another).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

from globalstore.errors import GlobalStoreError
from globalstore.read.changes import ChangeFeed
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus
from globalstore.waiting import Wait

__all__ = ["ReadSource", "StoreSource"]

_T = TypeVar("_T")


class ReadSource(Protocol):
    """Where the copies queries read come from (queries.Queries): a store's source, or a
    view's one pinned copy."""

    @property
    def topic(self) -> str:
        """The topic the store holds ("" while a reader has not opened a copy yet)."""

    @property
    def path(self) -> Path:
        """The store's directory."""

    # -- the copy that answers now -----------------------------------------------------------

    def copy(self) -> Copy:
        """The copy that answers now; StoreNotReady or StoreClosed when none may."""

    def serving(self) -> object | None:
        """What answers now (a copy, a store), never raising: a read that failed on what it
        took is repeated once this has moved (a switch closes the old store at once)."""

    def scan(self, open_scan: Callable[[Copy], Iterator[_T]]) -> Iterator[_T]:
        """A scan opened on the copy that answers now, which stays open for it, however many
        swaps happen meanwhile, until the scan ends."""


class StoreSource(ReadSource, Protocol):
    """Where a store's data comes from, and what that decides."""

    # -- start and stop ----------------------------------------------------------------------

    def begin(self, timeout: float) -> None:
        """Start up to the wait for ready (start() then waits, unless told not to)."""

    def ready_wait(self) -> Wait:
        """What start() waits for: reached once the store answers; raises the error that
        stopped it before that, or StoreClosed."""

    def abort(self) -> None:
        """Release what begin() took, after a start that failed: start() may be called
        again."""

    def gave_up(self, timeout: float) -> GlobalStoreError:
        """After a start not ready within `timeout`: release what begin() took (abort()); the
        error start() raises."""

    def started(self) -> bool:
        """Whether begin() ran and no abort() or close() since."""

    def close(self) -> None:
        """Stop, and close every copy. Idempotent."""

    # -- position, the topic's end, freshness ------------------------------------------------

    def position(self) -> dict[int, int]:
        """{partition: next offset applied} in the copy that answers now."""

    def lag(self) -> dict[int, int]:
        """{partition: records between what is applied and the topic's end as last known}."""

    def position_wait(self, wanted: Mapping[int, int]) -> Wait:
        """Reached once every partition in `wanted` is applied at least that far; ValueError
        for a partition the topic does not have."""

    def count_wait(self) -> Wait | None:
        """Reached once this process's follower has counted the live keys; None when no
        follower here counts them (a count is then made over a scan when none is stored)."""

    def status(self) -> StoreStatus:
        """What the store reports of itself."""

    def checkpoint(self, dest: Path) -> None:
        """A consistent checkpoint of the copy into `dest`, or StorageError where none can be
        taken."""

    # -- changes -----------------------------------------------------------------------------

    def open_feed(self, prefix: str | None, keys: Iterable[str] | None, buffer: int) -> ChangeFeed:
        """A feed of the changes visible from now on (Store.changes())."""

    def end_feeds(self) -> None:
        """End every feed, and any opened from now on; takes no lock (Store.end_changes())."""
