"""Walking the keys of a point-in-time iterator: scans and their bounds, index lookups, and
the background key count."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import rocksdict

from globalstore.storage.failures import is_absent
from globalstore.storage.keys import split_entry

__all__ = ["Recount", "Values", "bounded", "index_items", "scan_items", "uncached"]


class Values(Protocol):
    """The data of one instant, read by key, raising a bare Exception("key not found") for
    an absent key (failures.is_absent): a Snapshot, or for a RocksDB secondary, whose
    snapshot's get reads the latest data, pinned.SeekingValues."""

    def __getitem__(self, key: bytes, /) -> bytes: ...


def scan_items(
    db: rocksdict.Rdict, lower: bytes | None, upper: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """(key, raw value) with lower <= key < upper, over one point-in-time view.

    The RocksDB iterator is created before the first item is yielded, and an iterator sees
    the database as of its creation, so a scan never mixes two batches. Bounds are checked
    here: ReadOptions' iterate bounds are unreliable in rocksdict 0.3.29.
    """
    ro = uncached()
    if reverse:
        items = db.items(backwards=True, from_key=upper, read_opt=ro)
    else:
        items = db.items(from_key=lower, read_opt=ro)
    if upper is None and (lower is None or not reverse):
        return items  # rocksdict's iterator already starts and ends right
    return bounded(items, lower, upper, reverse)


def uncached() -> rocksdict.ReadOptions:
    """Options of a read that visits each block once (a scan, the recount): it keeps them out
    of the block cache that point gets use."""
    ro = rocksdict.ReadOptions()
    ro.fill_cache(False)
    return ro


def bounded(
    items: Iterable[tuple[bytes, bytes]], lower: bytes | None, upper: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """The items with lower <= key < upper, of an iterator that starts at the right end:
    ReadOptions' iterate bounds are unreliable in rocksdict 0.3.29."""
    if reverse:
        for key, value in items:
            if upper is not None and key >= upper:
                continue  # seek_for_prev lands on `upper` itself when it exists
            if lower is not None and key < lower:
                return
            yield key, value
    else:
        for key, value in items:
            if upper is not None and key >= upper:
                return
            yield key, value


def index_items(
    entries: rocksdict.RdictIter,
    values: Values,
    lower: bytes,
    upper: bytes,
    reverse: bool,
) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(index value, key, raw value) of each index entry in [lower, upper), walking
    `entries` (over the index column family) and reading each key from `values` (the data
    of the same instant): both made at the same sequence number, so one view. A key whose value is
    absent is skipped (it cannot be: entries and values are written in one batch)."""
    if reverse:
        entries.seek_for_prev(upper)
        step = entries.prev
    else:
        entries.seek(lower)
        step = entries.next
    while entries.valid():
        entry: bytes = entries.key()
        if entry >= upper:
            if not reverse:
                return
            step()  # seek_for_prev lands on `upper` itself when it exists
            continue
        if entry < lower:
            if reverse:
                return
            step()
            continue
        value, key = split_entry(entry)
        try:
            raw = values[key]  # a point read: cheaper than seeking an iterator (RocksDB's Get)
        except Exception as exc:
            if not is_absent(exc):
                raise
        else:
            yield value, key, raw
        step()


@dataclass
class Recount:
    """A keys-only count over one point-in-time iterator, plus the exact changes applied
    since that iterator was created."""

    keys: Iterator[bytes]
    counted: int = 0
    delta: int = 0

    @classmethod
    def of(cls, db: rocksdict.Rdict) -> Recount:
        """A count of the keys `db` holds now."""
        return cls(db.keys(read_opt=uncached()))

    def step(self, chunk: int) -> int | None:
        """Count up to `chunk` more keys: the live keys once the iterator ends, else None."""
        seen = sum(1 for _ in itertools.islice(self.keys, chunk))
        self.counted += seen
        return None if seen == chunk else self.counted + self.delta
