"""Batch: one write to a store, the RocksDB WriteBatch and the StorageState the store holds
once it is written.

Every write of storage/ is one: Storage.batch() starts it from the current state, whoever
has something to write puts it in (apply's records and offsets, the secondary indexes, the
time index, the meta entries below) and moves the state along with it, and Storage.commit()
writes it under the view lock, then publishes its state. One new state per write, after the
write: a reader on another thread sees each write whole, the positions with the index counts
of the same batch (contract 5), and the data on disk is never behind the state it reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

import rocksdict

from globalstore.codec import LAYOUT_VERSION
from globalstore.storage.meta import (
    I64,
    K_APPLIED_AT,
    K_COUNT,
    K_IN_SYNC_AT,
    K_INVALID_HELD,
    K_LAYOUT,
    K_MIGRATE_FROM,
    K_RESTORED_AT,
    K_TOPIC,
    K_TOPIC_ID,
    UNDECODABLE_COUNTING,
    offset_key,
    opt_int,
)
from globalstore.storage.quarantine import Quarantine
from globalstore.storage.records import (
    Applied,
    Checked,
    Delete,
    DeleteAt,
    NativeBatch,
    Put,
    Records,
    fill,
)
from globalstore.storage.state import StorageState

try:
    from globalstore.storage import _entries
except ImportError:  # built without its C extension: the Python put and delete
    _entries = None  # type: ignore[assignment]

try:
    from globalstore.storage import _ordered
except ImportError:  # built without its C extension: values put in the order they come
    _ordered = None  # type: ignore[assignment]

__all__ = ["Batch", "ValueOrder", "VersionRecorder"]


# Keys that come in runs this long or longer, on average, go in as they come: a batch of a few
# long runs (each partition's keys in order) is written as fast unsorted, and a sort would
# cost it (docs/performance.md, "Restore").
_LONG_RUN = 64
# A store that writes its values as they come passes all but one batch in this many straight
# to the WriteBatch, without even counting their order: that one tells whether it changed.
_RECHECK = 16


class ValueOrder:
    """Whether a batch's values go into its WriteBatch sorted by key (_ordered.c): decided
    from a batch before, since a topic's key order is its producers' and seldom changes.
    Sorting pays when keys come in any order; the first batch sorts."""

    def __init__(self) -> None:
        self.sorting = True
        self._passed = 0  # batches passed straight through since the last one looked at

    def looks(self) -> bool:
        """Whether the next batch's values go through KeyOrder: each while sorting, else one
        in _RECHECK."""
        if self.sorting:
            return True
        self._passed = (self._passed + 1) % _RECHECK
        return self._passed == 0

    def learn(self, writes: int, breaks: int) -> None:
        """A batch of `writes` values, `breaks` of whose keys sorted before the one before."""
        self.sorting = breaks * _LONG_RUN > writes


class VersionRecorder(Protocol):
    """What writes the versions of a batch's records beside their values (version_recorder.py's
    Recorder): declared here, so a batch needs nothing of history to use one."""

    def wrap(self, put: Put, delete: Delete) -> tuple[Put, Delete]:
        """`put` and `delete`, each also writing the version it makes (the Python loop's)."""

    def follow(self, records: Records) -> Records:
        """`records`, each noted as the one being applied as the loop takes it."""

    def put(self, put: Put) -> Put:
        """`put`, also writing the version it makes."""

    def delete_at(self, delete: Delete) -> DeleteAt:
        """`delete`, given each delete's record, also writing the tombstone's version."""

    def finish(self) -> None:
        """The loop is done: the versions it left to write after it, written."""


class Batch:
    """One write under way: its WriteBatch, and the state the store holds once written."""

    def __init__(
        self,
        state: StorageState,
        meta: rocksdict.ColumnFamily,
        quarantine: Quarantine | None = None,
    ) -> None:
        self.wb = rocksdict.WriteBatch(raw_mode=True)
        self.state = state  # moved along with what is put in; published by Storage.commit
        self.logged = True  # False: skip the write-ahead log (a bulk apply)
        # The change in live keys it makes that a count running over an older view (the
        # recount) cannot see: its keys deleted, or an exact apply's.
        self.live_delta = 0
        # Of the records put: the next offset of each partition they came from, and (when
        # tracked) {key: stored bytes, None if deleted}, the last write of each key.
        self.nexts: dict[int, int] = {}
        self.staged: dict[bytes, bytes | None] | None = None
        # {key: stored bytes before the batch, None if absent} where count_exactly read them
        # and was asked to keep them, for the indexes.
        self.olds: dict[bytes, bytes | None] | None = None
        # The data keys it writes, for the cache of decoded values (cache.py): None when
        # they are not listed (the whole cache is then emptied), empty for a meta-only write.
        self.changed: Collection[bytes] | None = None
        # A store that quarantines invalid values: its quarantine, and what the batch changes
        # in it ({key: held after the batch}; quarantine.py).
        self.quarantine = quarantine
        self.quarantining: dict[bytes, bool] = {}
        self.checked: Checked | None = None  # the C loop's way past the check, if it may
        # A store with history: what writes each record's version beside its value.
        self.recorder: VersionRecorder | None = None
        self._meta = meta
        # Whether the records' values go in sorted, and what sorts them until they are written.
        self.value_order: ValueOrder | None = None
        self._order: _ordered.KeyOrder | None = None

    def change(self, **fields: Any) -> None:
        """Move the state the batch publishes: `fields` of StorageState."""
        self.state = dataclasses.replace(self.state, **fields)

    def put_meta(self, key: bytes, value: bytes | None) -> None:
        """Put (None: delete) an entry of the meta column family."""
        if value is None:
            self.wb.delete(key, self._meta)
        else:
            self.wb.put(key, value, self._meta)

    def records(
        self, records: Records, ends: Mapping[int, int], track: bool, list_keys: bool
    ) -> Applied:
        """Put a consumed batch's records (records.Record tuples) and note the next offset of
        each partition: the one after its last record, or the end reached with the batch
        (`ends`, {partition: offset}), whichever is further. An end made of transaction
        markers or aborted records holds nothing to apply, yet it is reached.
        Applied.present lists the batch's keys when `list_keys` is set, else it stays empty
        (one dict store a record saved)."""
        out = Applied()
        put, delete = self._staging(track)
        recorder = self.recorder
        if recorder is None:
            out.present = fill(put, delete, records, out, self.nexts, list_keys)
        else:
            put, delete = recorder.wrap(put, delete)
            out.present = fill(put, delete, recorder.follow(records), out, self.nexts, list_keys)
            recorder.finish()
        self._write_in_order()
        out.records = len(records)
        for p, end in ends.items():
            # Everything before the end was delivered (or was never data).
            self.nexts[p] = max(self.nexts.get(p, 0), end)
        return out

    def native(self, restorer: NativeBatch, timeout: float, track: bool) -> Applied:
        """Put the records of the batch the C loop consumes, as records() puts the same ones."""
        out = Applied()
        put, delete = self._staging(track)
        remove: Delete | DeleteAt = delete
        checked, recorder = self.checked, self.recorder
        # `checked` only for a quarantining store, `record_deletes` only with history: a
        # NativeBatch without them needs no such parameters.
        options: dict[str, Any] = {}
        if recorder is not None:
            put, remove = recorder.put(put), recorder.delete_at(delete)
            options["record_deletes"] = True
            if checked is not None:
                checked = (recorder.put(checked[0]), checked[1], checked[2])
        if checked is not None:
            options["checked"] = checked
        out.records = restorer.fill(put, remove, self.nexts, out.skipped, timeout, **options)
        if recorder is not None:
            recorder.finish()
        self._write_in_order()
        return out

    def moved(self) -> dict[int, int]:
        """The partitions whose next offset the records move past the stored one."""
        positions = self.state.positions
        return {p: o for p, o in self.nexts.items() if o > positions.get(p, -1)}

    def count_exactly(
        self, changed: Mapping[bytes, bool], get: Callable[[bytes], bytes | None], keep: bool
    ) -> int | None:
        """The live-key count after the records ({key: live after the batch}), each key
        looked up with `get` before the batch is written (None while the count is unknown);
        `keep`: the values read kept in `olds`. map() calls `get` with no Python frame a
        key: cheaper than a generator, and the interpreter cannot hand the GIL to a reader
        in the middle of the batch."""
        olds = list(map(get, changed))
        if keep:
            self.olds = dict(zip(changed, olds, strict=True))
        was_live = len(changed) - olds.count(None)
        self.live_delta = sum(changed.values()) - was_live
        return None if self.state.count is None else self.state.count + self.live_delta

    def _staging(self, track: bool) -> tuple[Put, Delete]:
        """The put and delete a loop fills the batch's data with: the WriteBatch's own or,
        when `track` (the store has indexes or a time index), ones that also note what each
        key was last given, in `staged`, for the indexes; in a store with a quarantine, each
        checked first (quarantine.py). Either loop (Python or C) calls them, so both index
        and quarantine alike."""
        put, delete = self._tracking() if track else self._data_writes()
        quarantine = self.quarantine
        if quarantine is None:
            return put, delete
        unchecked = put
        put, delete, self.quarantining = quarantine.guard(put, delete, self.put_meta)
        if quarantine.plain:
            self.checked = (unchecked, quarantine.keys, self.quarantining)
        return put, delete

    def _data_writes(self) -> tuple[Put, Delete]:
        """The put and delete of the records' values: in key order as `value_order` says
        (_ordered.c), or the WriteBatch's own where it is not given or not built."""
        wb, order = self.wb, self.value_order
        if _ordered is None or order is None or not order.looks():
            return wb.put, wb.delete
        self._order = _ordered.KeyOrder(wb.put, wb.delete, order.sorting)
        return self._order.put, self._order.delete

    def _write_in_order(self) -> None:
        """The values a loop filled the batch with and KeyOrder kept, into the WriteBatch in
        key order; what their order was tells `value_order` whether the next batch sorts."""
        if self._order is not None and self.value_order is not None:
            self.value_order.learn(*self._order.flush())
            self._order = None

    def _tracking(self) -> tuple[Put, Delete]:
        write, remove = self._data_writes()
        staged = self.staged = {}
        if _entries is not None:  # the same, in C: no Python frame a record
            return _entries.Staging(write, staged), _entries.Staging(remove, staged)

        def put(key: bytes, value: bytes) -> None:
            write(key, value)
            staged[key] = value

        def delete(key: bytes) -> None:
            remove(key)
            staged[key] = None

        return put, delete

    def forget(self, keys: Iterable[bytes]) -> None:
        """`keys` are deleted outside the records (a purge of expired keys): a store that
        marks the undecodable values it stores drops their marks and counts them out."""
        quarantine = self.quarantine
        if quarantine is None or quarantine.withhold:
            return
        for key in keys:
            if key in quarantine.keys:
                self.put_meta(quarantine.entry_of(key), None)
                self.quarantining[key] = False
        self._count_quarantined()

    def uncount(self) -> None:
        """The batch's values go in unchecked (a bulk restore of a store that stores
        undecodable values as they came): the count is unknown, in the batch of those values,
        until the pass after the restore has marked them all (Storage.undecodable_step)."""
        if not self.state.undecodable_counting:
            self.put_meta(K_INVALID_HELD, I64.pack(UNDECODABLE_COUNTING))
            self.change(undecodable=None, undecodable_counting=True)

    def settle(self) -> None:
        """The batch is written: the quarantine holds what it put in."""
        if self.quarantine is not None:
            self.quarantine.settle(self.quarantining)

    def advance(self, moved: Mapping[int, int], count: int | None, now_ms: int) -> None:
        """The partitions' next offsets the batch's records moved, the wall time it is
        applied at and the live-key count after it (None: unknown until a recount)."""
        for p, o in moved.items():
            self.wb.put(offset_key(p), I64.pack(o), self._meta)
        self.put_meta(K_APPLIED_AT, I64.pack(now_ms))
        self.put_meta(K_COUNT, None if count is None else I64.pack(count))
        self.change(positions={**self.state.positions, **moved}, count=count)
        self._count_quarantined()

    def _count_quarantined(self) -> None:
        """The quarantine's count after the batch, in the batch: not while the marks are
        being counted after a bulk restore (their pass writes the count when it ends)."""
        quarantine = self.quarantine
        if quarantine is None or not self.quarantining:
            return
        if not quarantine.withhold and self.state.undecodable_counting:
            return
        held = quarantine.count_after(self.quarantining)
        self.put_meta(quarantine.count_key, I64.pack(held))
        self.change(undecodable=held)
        if quarantine.withhold:
            self.change(quarantined=held)

    def initialise(
        self, topic: str | None, topic_id: str | None, now_ms: int, more: Mapping[bytes, bytes]
    ) -> None:
        """The meta entries of a new store of the current layout, for `topic`."""
        for key, value in more.items():
            self.put_meta(key, value)
        self.put_meta(K_LAYOUT, str(LAYOUT_VERSION).encode())
        self.put_meta(K_COUNT, I64.pack(0))
        self.put_meta(K_IN_SYNC_AT, I64.pack(now_ms))
        if topic is not None:
            self.put_meta(K_TOPIC, topic.encode())
        if topic_id is not None:
            self.put_meta(K_TOPIC_ID, topic_id.encode())
        self.change(count=0, layout=LAYOUT_VERSION)

    def mark_restored(self, now_ms: int) -> None:
        """A restore reached its end offsets at `now_ms` (so the store held the topic's end)."""
        self.put_meta(K_RESTORED_AT, I64.pack(now_ms))
        self.put_meta(K_IN_SYNC_AT, I64.pack(now_ms))
        self.change(restored_at_ms=now_ms)

    def rewrite(
        self, pairs: Iterable[tuple[bytes, bytes]], meta: Mapping[bytes, bytes | None]
    ) -> None:
        """Values rewritten and meta entries put or deleted (migrations, repairs); the state's
        layout entries follow what the batch writes to them."""
        for key, value in pairs:
            self.wb.put(key, value)
        for key, mvalue in meta.items():
            self.put_meta(key, mvalue)
        if K_LAYOUT in meta:
            self.change(layout=opt_int(meta[K_LAYOUT]))
        if K_MIGRATE_FROM in meta:
            self.change(migrate_from=opt_int(meta[K_MIGRATE_FROM]))
