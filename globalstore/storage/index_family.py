"""The index column family: the secondary indexes' and the time index's entries (their keys:
keys.py) in a store's RocksDB.

A store gets the family when its first index or its time index is defined, not before: a
store that never had an index keeps the column families of a version from before indexes,
which can still open it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

import rocksdict

from globalstore.storage.keys import (
    KeyIndexValues,
    count_key,
    id_ranges,
    write_changes,
    write_entries,
)
from globalstore.storage.meta import I64, INDEX_CF, IndexDef
from globalstore.storage.scan import Values, index_items

__all__ = ["IndexFamily"]


class IndexFamily:
    """The index column family of one open database: its writes go into the caller's
    WriteBatch, its reads see the database as it is."""

    def __init__(self, db: rocksdict.Rdict) -> None:
        self._family = db.get_column_family(INDEX_CF)
        # Public for the writers that put into a WriteBatch themselves (version_recorder.py's,
        # in C).
        self.handle = db.get_column_family_handle(INDEX_CF)

    def entries(self, index_id: int) -> int:
        """The stored count of index `index_id`'s (key, index value) entries."""
        raw = self._family.get(count_key(index_id))
        return 0 if raw is None else int(I64.unpack(raw)[0])

    def index_into(
        self,
        wb: rocksdict.WriteBatch,
        keys: list[bytes],
        news: Mapping[str, list[KeyIndexValues]],
        olds: Mapping[str, list[KeyIndexValues | None]],
        defs: Mapping[str, IndexDef],
        entries: Mapping[str, int],
        lookup: list[int] | None = None,
        each: bool = False,
    ) -> dict[str, int]:
        """Put in `wb` the changes of the indexes named in `news` ({name: each key's index
        values after the batch, in the order of `keys`}) and the new entry counts of those
        that changed; returns the counts after the batch (`entries` are those before it).
        An index in `olds` goes from the values given there (its keys' before the batch,
        None: none); the others keep reverse entries, read as they were before the batch,
        those of the keys at `lookup` only (None: of every key; the others have none);
        `each`: one get each (get_each: a follower's batch), else with one multi-get an
        index (a bulk restore's)."""
        # The entries go in as the batch's default column family's: rocksdict's put costs
        # less without a column family argument, and it is made two to four times a record
        # of two indexes (docs/performance.md, "One pass over a value; the floor that stops
        # 50 %").
        read = self.get_each if each else self.get_many
        wb.set_default_column_family(self.handle)
        try:
            deltas = {
                name: write_entries(defs[name].id, keys, values, olds[name], wb.put, wb.delete)
                if name in olds
                else write_changes(
                    defs[name].id, keys, values, read, wb.put, wb.delete, None, lookup
                )
                for name, values in news.items()
            }
        finally:
            wb.set_default_column_family(None)
        after = dict(entries)
        for name, delta in deltas.items():
            if delta:
                after[name] = after.get(name, 0) + delta
                self.put(wb, count_key(defs[name].id), I64.pack(after[name]))
        return after

    def drop_into(self, wb: rocksdict.WriteBatch, index_id: int) -> None:
        """Put in `wb` the deletion of every entry of index `index_id` (range deletions:
        instant; the space comes back as RocksDB compacts)."""
        for begin, end in id_ranges(index_id):
            self.delete_range(wb, begin, end)

    def items(
        self, values: Values, lower: bytes, upper: bytes, reverse: bool
    ) -> Iterator[tuple[bytes, bytes, bytes]]:
        """(index value, key, raw value) of the entries in [lower, upper), each value read
        from `values`, the data of the same sequence number as the entries' iterator, which
        the caller takes with it (Storage.index_scan)."""
        return index_items(self._family.iter(), values, lower, upper, reverse)

    def count(self, lower: bytes, upper: bytes) -> int:
        """How many entries lie in [lower, upper)."""
        return sum(1 for _ in self._keys(lower, upper))

    def keys(self, lower: bytes, upper: bytes, limit: int) -> list[bytes]:
        """The first `limit` entries in [lower, upper)."""
        return list(itertools.islice(self._keys(lower, upper), limit))

    def _keys(self, lower: bytes, upper: bytes) -> Iterator[bytes]:
        return itertools.takewhile(lambda k: k < upper, self._family.keys(from_key=lower))

    def get(self, key: bytes) -> bytes | None:
        """The raw index entry at `key`, None if absent."""
        return self._family.get(key)

    def put(self, wb: rocksdict.WriteBatch, key: bytes, value: bytes) -> None:
        """Add the write of one index entry to `wb`."""
        wb.put(key, value, self.handle)

    def delete(self, wb: rocksdict.WriteBatch, key: bytes) -> None:
        """Add the delete of one index entry to `wb`."""
        wb.delete(key, self.handle)

    def delete_range(self, wb: rocksdict.WriteBatch, begin: bytes, end: bytes) -> None:
        """Add the delete of the index entries in [begin, end) to `wb`."""
        wb.delete_range(begin, end, self.handle)

    def flush(self) -> None:
        """Persist the index column family's memtable."""
        self._family.flush()

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Raw index entries of `keys` in their order (None where absent), with one multi-get:
        the cheapest read per key, but rocksdict's multi-get lets go of the GIL."""
        return self._family.get(keys)

    def get_each(self, keys: list[bytes]) -> list[bytes | None]:
        """The same, one get each, whatever their number: rocksdict's get keeps the GIL, and
        a follower that lets it go waits a switch interval (5 ms) or more to take it back
        behind busy threads, once more per index and batch. map() calls get with no Python
        frame a key, so the interpreter cannot switch threads in the middle either."""
        return list(map(self._family.get, keys))

    def iterator(self) -> rocksdict.RdictIter:
        """An iterator over the family as it is now, whatever is written later (a view's:
        pinned.py)."""
        return self._family.iter()

    def items_from(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(entry, value) in key order from `start` on, over one point-in-time iterator."""
        return self._family.items(from_key=start)
