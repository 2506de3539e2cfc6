"""Pinned: a store's database as of one instant, for a view of several reads (a store's
view()). It reads as the live Storage does (reads.Reads), from one iterator over each column
family, all made at that instant under the storage's view lock (no write between them).

Why iterators and not a RocksDB snapshot: rocksdict 0.3.29's Snapshot.iter/items/keys read
the latest data, not the snapshot's (its iter() sets the snapshot on options it then does
not use), and a RocksDB secondary instance (a SharedStore's reader, a follower in another
process) reads the latest data even through a snapshot's get. A RocksDB iterator sees the
database as of its creation, wherever it is moved later, on every kind of instance; so one
made at the instant serves every read of the view, point reads included (a seek): each read
is a walk of a Cursor, which puts the shared iterator back where that walk was when another
walk moved it.

The iterators keep what they see in RocksDB (older values, purged versions) until let go:
close() lets them go, and a view is closed when its reads are done.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import rocksdict

from globalstore.storage.keys import expired_range, split_entry
from globalstore.storage.meta import I64, K_COUNT
from globalstore.storage.scan import bounded
from globalstore.storage.state import StorageState
from globalstore.storage.versions import scan_at, version_at

__all__ = ["Cursor", "Pinned", "SeekingValues"]


class Cursor:
    """Walks of one column family as of one instant, over one iterator made then, shared:
    a walk that finds the iterator moved by another seeks back to the key it was on. Thread
    safe: each step holds the iterator's lock."""

    def __init__(self, iterator: rocksdict.RdictIter) -> None:
        self._it = iterator
        self._lock = threading.Lock()
        self._walk: object = None  # the walk the iterator stands for now

    def items(
        self, from_key: bytes | None = None, backwards: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) from `from_key` on (None: from the first, or the last backwards);
        backwards from the last key at or before it, as rocksdict's items() walks."""
        walk, last = object(), None
        while True:
            with self._lock:
                it = self._it
                if last is not None and self._walk is walk:
                    it.prev() if backwards else it.next()
                elif last is not None:  # another walk moved it: back past `last`
                    if backwards:
                        it.seek_for_prev(last)
                        it.prev()
                    else:
                        it.seek(last)
                        it.next()
                elif from_key is None:
                    it.seek_to_last() if backwards else it.seek_to_first()
                else:
                    it.seek_for_prev(from_key) if backwards else it.seek(from_key)
                self._walk = walk
                if not it.valid():
                    return
                last, value = it.key(), it.value()
            yield last, value

    @contextlib.contextmanager
    def lend(self) -> Iterator[rocksdict.RdictIter]:
        """The iterator itself, for a read that moves it as it likes, under the lock: the
        walks then find it moved (history.py's reads borrow it so)."""
        with self._lock:
            self._walk = None
            yield self._it

    def get(self, key: bytes) -> bytes | None:
        """The value at `key`, None if absent."""
        for found, value in self.items(key):
            return value if found == key else None
        return None


class SeekingValues:
    """The data as an iterator made at one instant sees it, read by key as a snapshot is
    (scan.Values): for a RocksDB secondary, whose snapshot's get reads the latest data. A
    seek each, a little dearer than a get."""

    def __init__(self, data: Cursor) -> None:
        self._data = data

    def __getitem__(self, key: bytes) -> bytes:
        value = self._data.get(key)
        if value is None:  # as a Snapshot says it, so that readers of either say it alike
            raise Exception("key not found")
        return value


class _PinnedVersions:
    """The versions of a pinned database (history.py), read from its index family and its
    current values."""

    def __init__(self, index: Cursor | None, data: Cursor) -> None:
        self._index, self._data = index, data

    def get(self, key: bytes, t_ms: int) -> bytes | None:
        """The stored bytes of `key` as of `t_ms` (None: absent then)."""
        if self._index is None:
            return None
        current = self._data.get(key)
        with self._index.lend() as it:
            return version_at(it, key, t_ms, current)

    def scan(
        self, lower: bytes | None, upper: bytes | None, t_ms: int
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, stored bytes) as of `t_ms` of the keys in [lower, upper) present then."""
        if self._index is None:
            return iter(())
        return scan_at(self._index.lend, self._data.items(lower), lower, upper, t_ms)


class Pinned:
    """A store's database as of one instant: the reads of reads.Reads."""

    def __init__(
        self,
        path: Path,
        state: StorageState,
        data: Cursor,
        index: Cursor | None,
        meta: Cursor,
        taken_ms: int,
    ) -> None:
        """Cursors over the `data`, `index` (None: the store has no index family) and `meta`
        column families, all made at one sequence number, when the store held `state`, at
        wall time `taken_ms`."""
        self.path, self.state, self.taken_ms = path, state, taken_ms
        self._data, self._index, self._meta = data, index, meta
        self.history = _PinnedVersions(index, data)

    def get(self, key: bytes) -> bytes | None:
        """The raw value of `key` then, None if absent."""
        return self._data.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of `keys` then, in their order (None where absent): a seek each."""
        get = self._data.get
        return [get(key) for key in keys]

    def scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, raw value) with lower <= key < upper, then."""
        items = self._data.items(upper if reverse else lower, reverse)
        return bounded(items, lower, upper, reverse)

    def index_scan(
        self, lower: bytes, upper: bytes, reverse: bool
    ) -> Iterator[tuple[bytes, bytes, bytes]]:
        """(index value, key, raw value) of the index entries in [lower, upper), then."""
        if self._index is None:
            return
        entries = self._index.items(upper if reverse else lower, reverse)
        for entry, _ in bounded(entries, lower, upper, reverse):
            value, key = split_entry(entry)
            raw = self._data.get(key)
            if raw is not None:  # it is: entries and values are written in one batch
                yield value, key, raw

    def index_count(self, lower: bytes, upper: bytes) -> int:
        """How many index entries lay in [lower, upper)."""
        if self._index is None:
            return 0
        entries = self._index.items(lower)
        return sum(1 for _ in itertools.takewhile(lambda e: e[0] < upper, entries))

    def meta_items(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The meta column family's entries then, in key order from `start` on."""
        return self._meta.items(start)

    def live_count(self, cutoff_ms: int) -> int | None:
        """The count of live keys then, less those expired at `cutoff_ms`."""
        raw = self._meta.get(K_COUNT)
        if raw is None:
            return None
        return int(I64.unpack(raw)[0]) - self.index_count(*expired_range(cutoff_ms))

    def close(self) -> None:
        """Let the iterators go (a walk still open keeps its own)."""
        for name in ("_data", "_index", "_meta", "history"):
            self.__dict__.pop(name, None)
