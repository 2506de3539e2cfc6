"""History: every version of every key inside a window, for reads as of a time.

A store with history=seconds keeps its keys' versions (versions.py: their layout and the
rule that picks a key's version as of a time), written beside each batch's values by a
recorder (version_recorder.py), read as of a time, and purged once older than the window.
The meta column family records the window (K_HISTORY, ms), the oldest time the versions
are complete from (K_HISTORY_FROM, ms: the wall time a store began restoring or resuming;
before it, compaction, or an absence, may have removed versions the store never saw) and
the layout of the versions (K_HISTORY_LAYOUT; absent: layout 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import rocksdict

from globalstore.storage.host import IndexHost
from globalstore.storage.keys import successor
from globalstore.storage.meta import I64, K_HISTORY, K_HISTORY_FROM, K_HISTORY_LAYOUT, Meta
from globalstore.storage.state import StorageState
from globalstore.storage.version_recorder import Recorder
from globalstore.storage.versions import (
    LAYOUT,
    PREFIX,
    absent_at,
    data_items,
    head_of,
    key_of,
    partition_of,
    scan_at,
    timestamp_of,
    version_at,
)
from globalstore.storage.written import WrittenKeys

__all__ = ["History", "PurgeStep"]


@dataclasses.dataclass
class PurgeStep:
    """What one purge step did: versions removed, and whether the sweep has more to do."""

    removed: int
    more: bool


class History:
    """A Storage's history of versions: its setting, its reads and its purge."""

    def __init__(self, host: IndexHost) -> None:
        self._s = host
        self._cursor: bytes | None = None  # where the purge's sweep resumes
        self._written = WrittenKeys(host.is_empty)

    def forget_written(self) -> None:
        """The store was wiped: whether it is empty is decided again at the next batch."""
        self._written.forget()

    def loaded(self, state: StorageState, meta: Meta) -> StorageState:
        """`state` with the history window and its start as `meta` says."""
        return dataclasses.replace(
            state,
            history_ms=meta.history_ms,
            history_from_ms=meta.history_from_ms,
            history_layout=meta.history_layout,
        )

    def define(self, history_ms: int | None, from_ms: int) -> None:
        """Before any record is applied: keep versions for `history_ms` (None: keep none,
        and drop those kept), complete from `from_ms` on (the wall time this start began:
        what was written to the topic while the store was away may be compacted away)."""
        s, state = self._s, self._s.state
        if history_ms is None and state.history_ms is None:
            return
        batch = s.batch()
        if history_ms is None:
            if s.index is not None:
                s.index.delete_range(batch.wb, PREFIX, successor(PREFIX) or PREFIX)
            batch.put_meta(K_HISTORY, None)
            batch.put_meta(K_HISTORY_FROM, None)
            batch.put_meta(K_HISTORY_LAYOUT, None)
            batch.change(history_ms=None, history_from_ms=None, history_layout=None)
        else:
            s.index_family()  # versions are written there from the first batch on
            start = max(from_ms, state.history_from_ms or from_ms)
            batch.put_meta(K_HISTORY, I64.pack(history_ms))
            batch.put_meta(K_HISTORY_FROM, I64.pack(start))
            # A store is defined with history only when empty or already in this layout
            # (follow/plan.py rebuilds one of another layout first).
            batch.put_meta(K_HISTORY_LAYOUT, I64.pack(LAYOUT))
            batch.change(history_ms=history_ms, history_from_ms=start, history_layout=LAYOUT)
        s.commit(batch)

    def recorder(self, wb: rocksdict.WriteBatch, bulk: bool) -> Recorder | None:
        """What records a batch's versions into `wb`, None without history; `bulk`: the
        batch of a bulk restore (which reads the old values only of keys it wrote before,
        when the store was empty as it began)."""
        s = self._s
        if s.state.history_ms is None:
            return None
        return Recorder(wb, s.index_family().handle, s.get_many, self._written.filter(bulk))

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: bytes, t_ms: int) -> bytes | None:
        """The stored bytes of `key` as of `t_ms` (None: absent then): its current value and
        its version entries, read with no write between them."""
        s = self._s
        index = s.index
        if index is None:
            return None
        with s.view_lock:
            current, it = s.get(key), index.iterator()
        return version_at(it, key, t_ms, current)

    def scan(
        self, lower: bytes | None, upper: bytes | None, t_ms: int
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, stored bytes) as of `t_ms` of the keys in [lower, upper) present then, in
        key order, over point-in-time iterators of the data and the versions (made now, with
        no write between them)."""
        s = self._s
        index = s.index
        if index is None:
            return iter(())
        with s.view_lock:
            values, it = s.data_iterator(), index.iterator()
        return scan_at(
            lambda: contextlib.nullcontext(it), data_items(values, lower), lower, upper, t_ms
        )

    # -- the purge ---------------------------------------------------------------------------

    def purge(self, cutoff_ms: int, limit: int) -> PurgeStep:
        """Delete the version entries no read at or after `cutoff_ms` can answer with, for
        up to about `limit` of them from where the sweep stands, in one batch: in each
        partition, of a key's versions with a timestamp <= cutoff_ms (its current value
        among them, the newest of its partition: never deleted here) all but the last
        (which can still answer), and that one too when it is a tombstone, or a value
        expired at the cutoff, and all the key has left. The versions that answer at the
        cutoff stay. Called between applies, so no write comes between reading and
        deleting."""
        s = self._s
        index = s.index
        if index is None or s.state.history_ms is None:
            return PurgeStep(0, False)
        items = index.items_from(self._cursor or PREFIX)
        ttl_ms = s.state.ttl_ms
        batch = s.batch()
        removed = 0
        last_entry: bytes | None = None
        group: list[tuple[bytes, bytes]] = []
        more = False
        for seen, (entry, version) in enumerate(items):
            if not entry.startswith(PREFIX):
                break
            if group and head_of(entry) != head_of(group[0][0]):
                removed += self._drop_old(batch.wb, group, cutoff_ms, ttl_ms)
                group = []
                if seen >= limit:  # a chunk ends between two keys
                    more, last_entry = True, entry
                    break
            group.append((entry, version))
        removed += self._drop_old(batch.wb, group, cutoff_ms, ttl_ms)
        self._cursor = last_entry if more else None
        if removed:
            s.commit(batch)
        return PurgeStep(removed, more)

    def _drop_old(
        self,
        wb: rocksdict.WriteBatch,
        group: list[tuple[bytes, bytes]],
        cutoff_ms: int,
        ttl_ms: int | None,
    ) -> int:
        if not group:
            return 0
        family = self._s.index_family()
        current = self._s.get(key_of(head_of(group[0][0])))
        old = [(e, v) for e, v in group if timestamp_of(v) <= cutoff_ms]
        if not old:
            return 0
        # In each partition the newest of them answers from the cutoff on until a later one:
        # the current value if it is one of them (the newest of its partition), else the
        # first entry (newest first).
        last: dict[int, bytes | None] = {}
        if current is not None and timestamp_of(current) <= cutoff_ms:
            last[partition_of(current)] = None  # no entry: the current value answers
        for e, v in old:
            last.setdefault(partition_of(v), e)
        drop = [e for e, v in old if last[partition_of(v)] != e]
        # A tombstone answers "absent", and so does a value past the ttl at the cutoff (and
        # after it), which no version at all says too only when it is all the key has left.
        if current is None and len(old) == len(group) and len(last) == 1:
            ((answering, version),) = [(e, v) for e, v in old if e in last.values()]
            if absent_at(version, cutoff_ms, ttl_ms):
                drop.append(answering)
        for entry in drop:
            family.delete(wb, entry)
        return len(drop)
