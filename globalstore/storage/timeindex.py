"""The time index of a store with a ttl (shaping/ttl.py says what it is for; its keys are in
keys.py): its entries written with each batch, the purge of expired keys, the background
build, and a count that leaves the expired keys out. Storage (database.py) calls it from its
write path; the store thread's shaping/ttl.Purge drives the rest, between follow batches.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from globalstore.codec import record_timestamp
from globalstore.storage.batch import Batch
from globalstore.storage.host import IndexHost
from globalstore.storage.index_defs import SecondaryIndexes
from globalstore.storage.keys import (
    TIME,
    all_time_entries,
    expired_range,
    split_time_key,
    time_changes,
)
from globalstore.storage.meta import (
    I64,
    K_COUNT,
    K_TIME_INDEX,
    K_TTL,
    Meta,
    cursor_entry,
    parse_cursor,
)
from globalstore.storage.state import StorageState
from globalstore.storage.versions import keep_version

__all__ = ["TimeIndex"]

log = logging.getLogger(__name__)


class TimeIndex:
    """A Storage's time index (shaping/ttl.Purge drives its purge and build)."""

    def __init__(self, host: IndexHost, secondary: SecondaryIndexes) -> None:
        self._s = host
        self._secondary = secondary  # a purge deletes keys: their index entries go with them

    @property
    def time_cursor(self) -> bytes | None:
        """The key the time index's build resumes from: b"" before it began, None once built or
        without a time index."""
        return self._s.state.time_cursor

    def loaded(self, state: StorageState, meta: Meta) -> StorageState:
        """`state` with the time index as `meta` and the index family say."""
        exists, cursor = parse_cursor(meta.time_index)
        return dataclasses.replace(
            state,
            ttl_ms=meta.ttl_ms,
            time_index=exists,
            time_cursor=cursor,
            time_entries=self._stored_entries() if exists else 0,
        )

    def _stored_entries(self) -> int:
        index = self._s.index
        raw = None if index is None else index.get(TIME)
        return 0 if raw is None else int(I64.unpack(raw)[0])

    @property
    def tracks_writes(self) -> bool:
        """Whether a batch must note the keys it writes for the time index: not without
        one, nor before its build has begun (no key lies before the cursor b"")."""
        state = self._s.state
        return state.time_index and state.time_cursor != b""

    def define(self, ttl_ms: int | None, bulk: bool) -> None:
        """Before any record is applied: keep a time index when the store has a ttl, drop it
        when not. A new one is built at once in an empty store (each write indexes what it
        writes), else in the background from a cursor. A `bulk` restore starts it over,
        built after the restore: indexing each record as it is written made a bulk apply
        about four times slower, and the build reads each key once, off the way to ready."""
        s, state = self._s, self._s.state
        if ttl_ms is None and not state.time_index and state.ttl_ms is None:
            return
        batch = s.batch()
        cursor, entries = state.time_cursor, state.time_entries
        if ttl_ms is None:
            if s.index is not None:
                s.index.delete_range(batch.wb, *all_time_entries())
            batch.put_meta(K_TIME_INDEX, None)
            batch.put_meta(K_TTL, None)
            cursor, entries = None, 0
            log.info("store %s: no ttl; dropped its time index", s.path)
        else:
            if bulk or not state.time_index:
                s.index_family().delete_range(batch.wb, *all_time_entries())
                cursor = b"" if bulk or not s.is_empty() else None
                entries = 0
                batch.put_meta(K_TIME_INDEX, cursor_entry(cursor))
            batch.put_meta(K_TTL, I64.pack(ttl_ms))
        batch.change(
            ttl_ms=ttl_ms,
            time_index=ttl_ms is not None,
            time_cursor=cursor,
            time_entries=entries,
        )
        s.commit(batch)

    # -- the write path ----------------------------------------------------------------------

    def into(self, batch: Batch, staged: Mapping[bytes, bytes | None]) -> None:
        """Put in `batch` the time entries of the keys it wrote ({key: stored bytes, None if
        deleted}) and the new entry count, if the store has a time index. The old entries
        are found from the old values' headers, read with one multi-get: no extra entry per
        key to keep, and a key's entry can never disagree with its value. While the index is
        being built, only keys before its cursor are indexed here: the
        build indexes the others as it reaches them, with their values of then."""
        s = self._s
        state = batch.state
        if not state.time_index:
            return
        keys = list(staged)
        if state.time_cursor is not None:
            keys = [k for k in keys if k < state.time_cursor]
        if not keys:
            return
        olds: list[bytes | None] = s.get_many(keys)
        deletes, puts = time_changes(keys, olds, staged)
        if not deletes and not puts:
            return
        family, wb = s.index_family(), batch.wb
        for entry in deletes:
            family.delete(wb, entry)
        for entry in puts:
            family.put(wb, entry, b"")
        entries = state.time_entries + len(puts) - len(deletes)
        family.put(wb, TIME, I64.pack(entries))
        batch.change(time_entries=entries)

    # -- the purge ---------------------------------------------------------------------------

    def _expired_entries(self, cutoff_ms: int, limit: int) -> list[bytes]:
        """Up to `limit` time entries older than `cutoff_ms`, oldest first."""
        index = self._s.index
        return [] if index is None else index.keys(*expired_range(cutoff_ms), limit)

    def purge(self, cutoff_ms: int, limit: int) -> tuple[int, list[bytes]]:
        """Delete the keys of up to `limit` time entries older than `cutoff_ms` (oldest
        first), their secondary index entries, the time entries and their share of the
        counts, in one batch; returns (time entries removed, keys deleted). Called between
        applies, so no write comes between reading the entries and deleting them. A key is
        deleted only if its value still has the entry's timestamp: a key rewritten since
        its entry was written has no entry at the old timestamp any more (the rewrite
        deleted it), so this only guards against an entry left stale by damage."""
        s = self._s
        entries = self._expired_entries(cutoff_ms, limit)
        if not entries:
            return 0, []
        pairs = [split_time_key(e) for e in entries]
        keys = [k for _, k in pairs]
        values: list[bytes | None] = s.get_many(keys)
        batch = s.batch()
        wb = batch.wb
        deleted = []
        state = batch.state
        family = s.index_family()
        for (ts, key), raw in zip(pairs, values, strict=True):
            if raw is not None and record_timestamp(raw) == ts:
                wb.delete(key)
                deleted.append(key)
                if state.history_ms is not None:  # a read as of a time before still sees it
                    keep_version(family, wb, key, raw)
        for entry in entries:
            family.delete(wb, entry)
        staged = dict.fromkeys(deleted)  # {key: None}: the keys deleted
        batch.forget(deleted)
        batch.changed = deleted
        if staged:
            olds = dict(zip(keys, values, strict=True))
            self._secondary.into(batch, staged, state.indexes, olds=olds)
        time_entries = state.time_entries - len(entries)
        family.put(wb, TIME, I64.pack(time_entries))
        count = None if state.count is None else state.count - len(deleted)
        if count is not None:
            batch.put_meta(K_COUNT, I64.pack(count))
        batch.live_delta = -len(deleted)  # a recount running counts over an older view
        batch.change(count=count, time_entries=time_entries)
        s.commit(batch)
        return len(entries), deleted

    # -- the build ---------------------------------------------------------------------------

    def build_chunk(self, limit: int) -> int:
        """Index up to `limit` stored keys from the build's cursor on, and move the cursor past
        them (or mark the index built), in one batch: a crash resumes there. Returns how
        many keys it read."""
        s, state = self._s, self._s.state
        pairs = s.keys_from(state.time_cursor, limit)
        batch = s.batch(data=False)
        family = s.index_family()
        keys = [key for key, _ in pairs]
        _, puts = time_changes(keys, [None] * len(keys), dict(pairs))  # none had an entry
        for entry in puts:
            family.put(batch.wb, entry, b"")
        # The smallest key after the last one indexed: where the next chunk starts.
        cursor = None if len(pairs) < limit else pairs[-1][0] + b"\x00"
        entries = state.time_entries + len(puts)
        family.put(batch.wb, TIME, I64.pack(entries))
        batch.put_meta(K_TIME_INDEX, cursor_entry(cursor))
        batch.change(time_cursor=cursor, time_entries=entries)
        s.commit(batch)
        return len(pairs)

    # -- reads -------------------------------------------------------------------------------

    def live_count(self, cutoff_ms: int) -> int | None:
        """The stored count less the keys expired at `cutoff_ms` that are not purged yet (the
        time entries below it), both read with no write in between; None while the count is
        unknown (a bulk restore not recounted yet)."""
        s = self._s
        with s.view_lock:
            raw = s.get_meta(K_COUNT)
            expired = s.index_count(*expired_range(cutoff_ms))
        return None if raw is None else int(I64.unpack(raw)[0]) - expired
