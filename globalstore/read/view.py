"""Views: the reads of queries.py over one copy pinned at one instant (View), and the faces'
way of opening one (Viewable.view()).

A view pins its copy as a scan does (source.py's scan(), so a swap or a heal leaves the copy
open for it) and holds it until it is closed: RocksDB iterators made at that instant
(storage/pinned.py) answer its every read, however many batches are applied meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from globalstore.errors import StoreClosed
from globalstore.read.as_of import moment
from globalstore.read.copy import Copy
from globalstore.read.protocols import AsOf
from globalstore.read.queries import Queries
from globalstore.read.source import ReadSource

__all__ = ["View", "Viewable"]

_T = TypeVar("_T")
_S = TypeVar("_S", bound=ReadSource)


class Viewable(Queries[_S]):
    """Queries that open views: the faces of a store (a view itself opens none)."""

    def view(self, as_of: AsOf | None = None) -> View:
        """One consistent view for several reads: every read made through it sees the store
        at one instant, the one this call takes (RocksDB iterators made then: storage/
        pinned.py), however many batches are applied, purged or swapped in meanwhile. With
        `as_of`, its reads answer as of that time unless they name another;
        HistoryUnavailable at once for a time the store cannot answer (the horizon is judged
        at the view's instant: the versions it needs stay in its iterators); an index read
        answers from them too (find()). `with store.view() as v: v.get(...); v.items(...)`:
        close it when done, since it holds its copy against heals and switches (as a scan
        does) and RocksDB keeps what its iterators see."""
        when = self._when(as_of)
        held = self._guard(lambda: self._source.scan(_pin))
        try:
            copy = self._guard(lambda: next(held))
            if when is not None:
                moment(copy.reads, when)  # the horizon, at once
        except BaseException:
            _close(held)
            raise
        return View(copy, held, when, lambda: self._closed)


def _pin(copy: Copy) -> Iterator[Copy]:
    """A view's hold on `copy`, opened as a scan is (so a swap leaves the copy open for it):
    the copy pinned, handed out once, and let go when the view closes the hold."""
    pinned = copy.pinned()
    try:
        yield pinned
    finally:
        pinned.close()


def _close(it: Iterator[Any]) -> None:
    """End `it`, an iterator a source's scan() returned (each has a close())."""
    getattr(it, "close", lambda: None)()


class _ViewSource:
    """A view's one pinned copy, as a source of copies (source.ReadSource)."""

    def __init__(self, copy: Copy, store_closed: Callable[[], bool]) -> None:
        self._copy = copy
        self._store_closed = store_closed
        self.closed = False

    @property
    def topic(self) -> str:
        """The topic of the copy the view pinned."""
        return self._copy.topic

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self._copy.reads.path

    def copy(self) -> Copy:
        """The pinned copy; StoreClosed once the view or its store is closed."""
        if self.closed or self._store_closed():
            what = "view" if self.closed else "store"
            raise StoreClosed(f"{what} of {self.path} is closed")
        return self._copy

    def serving(self) -> Copy | None:
        """The pinned copy (nothing moves it), None once closed."""
        return None if self.closed else self._copy

    def scan(self, open_scan: Callable[[Copy], Iterator[_T]]) -> Iterator[_T]:
        """A scan of the pinned copy, which the view holds until it is closed."""
        return open_scan(self.copy())


class View(Queries[_ViewSource]):
    """One consistent view of a store for several reads (Viewable.view()): each one answers
    from the same copy, pinned at one instant, and as of the view's time when it has one.
    Close it (or use `with`) once its reads are done; a scan opened on it ends first."""

    def __init__(
        self,
        copy: Copy,
        held: Iterator[Copy],
        as_of_ms: int | None,
        store_closed: Callable[[], bool],
    ) -> None:
        """`copy`, pinned, held by `held` (the store's scan that keeps it open across swaps)
        until close(); reads answer as of `as_of_ms` unless they name a time (None: the
        instant it was pinned)."""
        super().__init__(_ViewSource(copy, store_closed))
        self._held = held
        self._as_of_ms = as_of_ms

    @property
    def as_of(self) -> float | None:
        """The time the view's reads answer as of (epoch seconds), None for the instant it
        was taken."""
        return None if self._as_of_ms is None else self._as_of_ms / 1000

    def get(self, key: str, default: Any = None, *, as_of: AsOf | None = None) -> Any:
        """Queries.get(), as of the view's time unless `as_of` names another."""
        when = self._when(as_of)
        if when is None:
            return super().get(key, default)
        return self._get_as_of(key.encode(), default, when)

    def count(self) -> int:
        """How many keys the view holds: the store's count then, or, as of a time, counted
        over a scan of the keys then."""
        if self._as_of_ms is not None:
            return sum(1 for _ in self.keys())
        return self._stored_count()

    def close(self) -> None:
        """Let the pinned copy go (its snapshots; a copy a swap replaced meanwhile closes
        now). Idempotent."""
        self._closed = self._source.closed = True
        _close(self._held)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
