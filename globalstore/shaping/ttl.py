"""Time to live: GlobalStore(..., ttl=seconds) hides a key whose newest record is older than
`ttl` from every query at once, and purges it from disk in the background.

Hiding is decided at read time from the record timestamp in the value's header (codec.py):
a value written at `ts` ms is expired once ts < now - ttl. A value without a known timestamp
(a legacy layout-0 value, or a record the producer gave none: UNKNOWN or negative) never
expires: there is nothing to measure its age by.

Purging walks the time index (its keys: storage/keys.py), whose entries name each key with
the timestamp of its value, in time order: the expired keys are the entries from the start
up to the cutoff. A key has exactly one entry, written in the same WriteBatch as its value
(storage/timeindex.py), so a key rewritten since an entry was read has no entry at the old
timestamp any more, and a purge never deletes a fresher value.

The meta entry "time_index" says whether the store has that index: "built", or the cursor of
its background build, which runs on the store thread before the purge: after a bulk restore
(which writes no time entries: indexing each record quadrupled its apply) and in a store that
had no ttl and now has one. Meanwhile writes index only the keys before the cursor; the
build indexes the others with their values of then. Without a ttl the store keeps no time
index at all (dropped at start with one range deletion).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator

from globalstore.codec import HEADER_SIZE, TIMESTAMP, TIMESTAMP_AT, V1, record_timestamp
from globalstore.storage.timeindex import TimeIndex

__all__ = ["Purge", "cutoff", "is_expired", "to_ms", "unexpired", "visible"]

log = logging.getLogger(__name__)


# -- hiding ----------------------------------------------------------------------------------


def to_ms(ttl: float | None) -> int | None:
    """A ttl in seconds as whole milliseconds (at least 1); None stays None."""
    return None if ttl is None else max(1, round(ttl * 1000))


def cutoff(ttl_ms: int, now_ms: int | None = None) -> int:
    """Values written before this wall time (ms) are expired."""
    return (int(time.time() * 1000) if now_ms is None else now_ms) - ttl_ms


def is_expired(raw: bytes, cutoff_ms: int) -> bool:
    """Whether a stored value is older than the cutoff; never for one without a timestamp."""
    ts = record_timestamp(raw)
    return ts is not None and ts < cutoff_ms


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
    unpack, size, at, v1 = TIMESTAMP.unpack_from, HEADER_SIZE, TIMESTAMP_AT, V1
    for key, raw in pairs:
        if len(raw) >= size and raw[0] == v1 and 0 <= unpack(raw, at)[0] < cutoff_ms:
            continue
        yield key, raw


# -- the chores of the store thread ----------------------------------------------------------


class Purge:
    """Deletes the expired keys, oldest first, `chunk` keys per step(): run by the store
    thread between follow batches, so it never races an apply. A step that found fewer than
    a chunk has emptied the expired range: the next one waits `idle` seconds (a key that
    expires meanwhile is already hidden; only its space waits)."""

    def __init__(self, storage: TimeIndex, ttl_ms: int, chunk: int = 2_000, idle: float = 1.0):
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
