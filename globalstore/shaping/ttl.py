"""Time to live: GlobalStore(..., ttl=seconds) hides a key whose newest record is older than
`ttl` from every query at once, and purges it from disk in the background.

Hiding is decided at read time from the record timestamp in the value's header (codec.py):
a value written at `ts` ms is expired once ts < now - ttl. A value without a known timestamp
(a legacy layout-0 value, or a record the producer gave none: UNKNOWN or negative) never
expires: there is nothing to measure its age by.

Purging walks a time index, kept in the index column family (indexes.py) under the prefix
b"t", which no secondary index can take (their keys start with b"e", b"k" or b"n"):
    t<ts><key>   the key's value was written at `ts` (ms, 8 bytes big-endian): in time order,
                 so the expired keys are the entries from the start up to the cutoff
    t            how many such entries there are (i64), for status and count()
A key has exactly one entry, that of its current value, written in the same WriteBatch as
the value (storage/timeindex.py): its previous entry is found by reading the old value's
header (one multi-get per batch). A key rewritten since an entry was read therefore has no
entry at the old timestamp any more, and a purge never deletes a fresher value.

The meta entry "time_index" says whether the store has that index: "built", or the cursor of
its background build, which runs on the store thread before the purge: after a bulk restore
(which writes no time entries: indexing each record quadrupled its apply) and in a store that
had no ttl and now has one. Meanwhile writes index only the keys before the cursor; the
build indexes the others with their values of then. Without a ttl the store keeps no time
index at all (dropped at start with one range deletion).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from globalstore.codec import HEADER

log = logging.getLogger(__name__)

TIME = b"t"  # the time entries' prefix in the index column family; alone, their count
_TS = struct.Struct(">Q")
_V1 = 1
_HEADER_SIZE = HEADER.size
_TS_AT = 2  # offset of the timestamp in codec.HEADER (layout u8, format u8, then ts i64)
_I64 = struct.Struct(">q")
BUILT = b"built"  # the meta entry of a complete time index; else b"cursor:" + hex


# -- keys of the index column family ---------------------------------------------------------


def time_key(ts: int, key: bytes) -> bytes:
    return TIME + _TS.pack(ts) + key


def split_time_key(entry: bytes) -> tuple[int, bytes]:
    """(timestamp ms, data key) of a time entry."""
    return _TS.unpack_from(entry, 1)[0], entry[1 + _TS.size :]


def expired_range(cutoff: int) -> tuple[bytes, bytes]:
    """[lower, upper) of the time entries written before `cutoff` (ms)."""
    return TIME + _TS.pack(0), TIME + _TS.pack(max(0, cutoff))


def all_entries() -> tuple[bytes, bytes]:
    """[begin, end) holding the whole time index, its count included: what dropping it
    deletes."""
    return TIME, TIME[:-1] + bytes([TIME[-1] + 1])


def timestamp(raw: bytes) -> int | None:
    """The record timestamp (ms) stored with a value, None when it has none that can age."""
    if len(raw) >= _HEADER_SIZE and raw[0] == _V1:
        ts: int = _I64.unpack_from(raw, _TS_AT)[0]
        return ts if ts >= 0 else None
    return None


# -- hiding ----------------------------------------------------------------------------------


def to_ms(ttl: float | None) -> int | None:
    return None if ttl is None else max(1, round(ttl * 1000))


def cutoff(ttl_ms: int, now_ms: int | None = None) -> int:
    """Values written before this wall time (ms) are expired."""
    return (int(time.time() * 1000) if now_ms is None else now_ms) - ttl_ms


def is_expired(raw: bytes, cutoff_ms: int) -> bool:
    """Whether a stored value is older than the cutoff; never for one without a timestamp."""
    ts = timestamp(raw)
    return ts is not None and ts < cutoff_ms


Lookup = Callable[[bytes], "bytes | None"]


def hiding(lookup: Lookup, ttl_ms: int | None) -> Lookup:
    """`lookup` itself without a ttl (the hot path stays RocksDB's get); with one, a lookup
    that answers None for an expired value."""
    if ttl_ms is None:
        return lookup
    unpack, now = _I64.unpack_from, time.time

    def live(key: bytes) -> bytes | None:
        raw = lookup(key)
        if raw is not None and len(raw) >= _HEADER_SIZE and raw[0] == _V1:
            ts = unpack(raw, _TS_AT)[0]
            if 0 <= ts < now() * 1000 - ttl_ms:
                return None
        return raw

    return live


def visible(raw: bytes | None, ttl_ms: int | None) -> bytes | None:
    """`raw`, or None if it is expired under `ttl_ms` (None: no ttl)."""
    if raw is None or ttl_ms is None or not is_expired(raw, cutoff(ttl_ms)):
        return raw
    return None


def unexpired(
    pairs: Iterable[tuple[bytes, bytes]], cutoff_ms: int
) -> Iterator[tuple[bytes, bytes]]:
    """The (key, raw value) pairs whose value is not expired at `cutoff_ms` (is_expired()
    inlined: a function call per key is a sizeable part of a scan)."""
    unpack, size, at = _I64.unpack_from, _HEADER_SIZE, _TS_AT
    for key, raw in pairs:
        if len(raw) >= size and raw[0] == _V1 and 0 <= unpack(raw, at)[0] < cutoff_ms:
            continue
        yield key, raw


# -- the time index's changes in one batch ---------------------------------------------------


def changes(
    keys: list[bytes], olds: list[bytes | None], news: Mapping[bytes, bytes | None]
) -> tuple[list[bytes], list[bytes]]:
    """(entries to delete, entries to put) for the keys a batch wrote, given their old
    stored bytes and {key: new stored bytes, None if deleted}. An unchanged timestamp
    deletes nothing. timestamp() inlined: this runs for every key a batch writes."""
    deletes, puts = [], []
    unpack, size, at = _I64.unpack_from, _HEADER_SIZE, _TS_AT
    for key, old in zip(keys, olds, strict=True):
        new = news[key]
        old_ts = unpack(old, at)[0] if old is not None and len(old) >= size and old[0] == 1 else -1
        new_ts = unpack(new, at)[0] if new is not None and len(new) >= size and new[0] == 1 else -1
        if old_ts == new_ts:
            continue
        if old_ts >= 0:  # a negative timestamp is none (UNKNOWN): it has no entry
            deletes.append(time_key(old_ts, key))
        if new_ts >= 0:
            puts.append(time_key(new_ts, key))
    return deletes, puts


def parse_cursor(raw: bytes | None) -> tuple[bool, bytes | None]:
    """(has a time index, its build cursor: None once built) of the meta entry."""
    if raw is None:
        return False, None
    if raw == BUILT:
        return True, None
    return True, bytes.fromhex(raw.removeprefix(b"cursor:").decode("ascii"))


def cursor_entry(cursor: bytes | None) -> bytes:
    return BUILT if cursor is None else b"cursor:" + cursor.hex().encode("ascii")


# -- the chores of the store thread ----------------------------------------------------------


class Expiring(Protocol):
    """What the purge and the build need of the storage (storage/timeindex.py)."""

    @property
    def time_cursor(self) -> bytes | None: ...

    def purge(self, cutoff_ms: int, limit: int) -> tuple[int, list[bytes]]: ...

    def build_chunk(self, limit: int) -> int: ...


class Purge:
    """Deletes the expired keys, oldest first, `chunk` keys per step(): run by the store
    thread between follow batches, so it never races an apply. A step that found fewer than
    a chunk has emptied the expired range: the next one waits `idle` seconds (a key that
    expires meanwhile is already hidden; only its space waits)."""

    def __init__(self, storage: Expiring, ttl_ms: int, chunk: int = 2_000, idle: float = 1.0):
        self.storage, self.ttl_ms, self.chunk, self.idle = storage, ttl_ms, max(1, chunk), idle
        self.purged = 0  # keys deleted since this start
        self._due = 0.0  # monotonic time of the next step that does work

    def step(self) -> list[bytes]:
        """Build the time index a chunk further if it is not complete, else purge a chunk of
        expired keys; returns the keys deleted."""
        now = time.monotonic()
        if now < self._due:
            return []
        if self.storage.time_cursor is not None:
            if self.storage.build_chunk(self.chunk) < self.chunk:
                log.info("time index built")
            return []
        entries, deleted = self.storage.purge(cutoff(self.ttl_ms), self.chunk)
        self.purged += len(deleted)
        if entries < self.chunk:
            self._due = now + self.idle
        return deleted

    @property
    def busy(self) -> bool:
        """More to do right away: the thread should not wait for records before the next step."""
        return time.monotonic() >= self._due
