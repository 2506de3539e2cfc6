"""History: every version of every key inside a window, for reads as of a time.

A store with history=seconds writes, beside each value it puts or deletes, a version entry
in the index column family, in the same WriteBatch (so a crash keeps versions and values
together, as it keeps offsets: contract 10). Layout LAYOUT (2), under the prefix b"h" (no
secondary index or time entry starts with it):

    h<escaped key>\\x00\\x00<partition: 4 bytes><offset, inverted: 8 bytes>
        a version of the key; value: the stored bytes the record wrote (codec.py: header
        with the record timestamp, partition and offset), or for a tombstone b"\\x00" +
        timestamp (8 bytes) + partition (4 bytes): no stored value starts with a zero byte

The key is escaped (\\x00 as \\x00\\xff) and ended with \\x00\\x00, which keeps the versions
of one key together and the keys in the data's byte order. A key's versions follow by
partition, and in each partition newest first (the offset inverted: 2**64 - 1 - offset).
Layout 1 (the first) kept them in (offset, partition) order; a store holding it is rebuilt
(shaping/history.py), and a reader of it refuses reads as of a time (read/as_of.py).

The version as of t (ms): in each partition, of the key's versions whose record timestamp
is <= t, the one with the greatest offset; of those (one per partition the key was written
to: a key moves when partitions are added), the one with the greatest timestamp, and on a
tie the greater partition. A partition whose timestamps go backwards still gives one
answer, the later record; and a key that stays in one partition reads its current value as
of any time at or after every timestamp it was given. Newest first, a partition's answer
is the first of its versions with a timestamp <= t: a read walks from the newest version
down to it, then steps (or seeks) past the partition's older ones (answer()).

The meta column family records the window (K_HISTORY, ms), the oldest time the versions
are complete from (K_HISTORY_FROM, ms: the wall time a store began restoring or resuming;
before it, compaction, or an absence, may have removed versions the store never saw) and
the layout of the versions (K_HISTORY_LAYOUT; absent: layout 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from collections.abc import Callable, Iterator

import rocksdict

from globalstore.codec import HEADER, HEADER_SIZE, TIMESTAMP, TIMESTAMP_AT
from globalstore.storage.host import IndexHost
from globalstore.storage.keys import successor
from globalstore.storage.meta import I64, K_HISTORY, K_HISTORY_FROM, K_HISTORY_LAYOUT, Meta
from globalstore.storage.records import Delete, DeleteAt, Put, Record, Records
from globalstore.storage.state import StorageState

try:
    from globalstore.storage import _history_walk
except ImportError:  # built without its C extension: the walk in Python
    _history_walk = None  # type: ignore[assignment]

try:
    from globalstore.storage import _entries
except ImportError:  # built without its C extension: the Python put and delete
    _entries = None  # type: ignore[assignment]

__all__ = [
    "LAYOUT",
    "PREFIX",
    "History",
    "PurgeStep",
    "Recorder",
    "answer",
    "scan_at",
    "version_at",
    "version_key",
    "walk",
]

LAYOUT = 2  # the layout of the versions this code writes and reads
PREFIX = b"h"
_END = b"\x00\x00"  # ends an escaped key
_PARTITION_AT = struct.Struct(">I")  # a version's partition, in its entry
_ORDER = struct.Struct(">IQ")  # partition, 2**64 - 1 - offset: newest first
_TOP = 2**64 - 1
_PAST = b"\xff"  # after a key's escaped form and end, sorts after all its versions
_TOMBSTONE = b"\x00"
_PARTITION = struct.Struct(">i")
_CHUNK = 256  # keys a scan reads per turn of its iterator
_STEPS = 16  # older versions of a partition stepped over before a seek passes the rest


def _escaped(key: bytes) -> bytes:
    return key.replace(b"\x00", b"\x00\xff") if b"\x00" in key else key


def version_key(key: bytes, partition: int, offset: int) -> bytes:
    """The entry of `key`'s version written by the record at (partition, offset)."""
    return PREFIX + _escaped(key) + _END + _ORDER.pack(partition, _TOP - offset)


def _key_of(head: bytes) -> bytes:
    """The data key of a key's entry head (PREFIX, escaped key, end)."""
    return head[1 : -len(_END)].replace(b"\x00\xff", b"\x00")


def _bound(key: bytes | None) -> bytes | None:
    """The entry bound of a data-key bound: every version of a key >= `key` sorts at or after
    it, every version of a smaller key before it."""
    return None if key is None else PREFIX + _escaped(key)


def _partition(version: bytes) -> int:
    if version[:1] == _TOMBSTONE:
        return int(_PARTITION.unpack_from(version, 1 + TIMESTAMP.size)[0])
    return int(HEADER.unpack_from(version)[3])


def _timestamp(version: bytes) -> int:
    if version[:1] == _TOMBSTONE:
        return int(TIMESTAMP.unpack_from(version, 1)[0])
    if len(version) >= HEADER_SIZE:
        return int(TIMESTAMP.unpack_from(version, TIMESTAMP_AT)[0])
    return -1


def answer(it: rocksdict.RdictIter, head: bytes, t_ms: int) -> bytes | None:
    """Of the key whose entries start with `head` (PREFIX, escaped key, end), `it` standing
    on its first version (or past the key: it has none), the stored bytes as of `t_ms` (None:
    absent then, or a tombstone), by the rule above; leaves `it` past the key's versions.
    In each partition the first version at or before t answers, and the partition's older
    ones are stepped over (a step costs less than a seek for the few a key has), or, past
    _STEPS of them, passed with a seek. In C (_history_walk.c) where built."""
    if _history_walk is not None:
        return _history_walk.answer(it, head, t_ms)
    return walk(it, head, t_ms)


def walk(it: rocksdict.RdictIter, head: bytes, t_ms: int) -> bytes | None:
    """answer() in Python: where the C walk is not built, and what a test checks it
    against."""
    found: bytes | None = None
    found_ts = -1
    unpack, tombstone, size = TIMESTAMP.unpack_from, _TOMBSTONE[0], len(head) + 4
    while it.valid():
        entry = it.key()
        if entry[: len(head)] != head or len(entry) != len(head) + _ORDER.size:
            break
        version = it.value()
        ts = unpack(version, 1 if version[0] == tombstone else TIMESTAMP_AT)[0]
        if ts > t_ms:
            it.next()
            continue
        # Partitions come in ascending order: on a tie of timestamps the later one wins.
        if ts >= found_ts:
            found, found_ts = version, ts
        partition = entry[:size]
        for _ in range(_STEPS):
            it.next()
            if not it.valid() or it.key()[:size] != partition:
                break
        else:
            it.seek(head + _PARTITION_AT.pack(int.from_bytes(partition[-4:], "big") + 1))
    return None if found is None or found[0] == _TOMBSTONE[0] else found


def version_at(it: rocksdict.RdictIter, key: bytes, t_ms: int) -> bytes | None:
    """The stored bytes of `key` as of `t_ms` (None: absent then), read with `it`, an
    iterator over the index column family (which it moves)."""
    head = PREFIX + _escaped(key) + _END
    it.seek(head)
    return answer(it, head, t_ms)


def scan_at(
    lend: Callable[[], contextlib.AbstractContextManager[rocksdict.RdictIter]],
    lower: bytes | None,
    upper: bytes | None,
    t_ms: int,
) -> Iterator[tuple[bytes, bytes]]:
    """(key, stored bytes) as of `t_ms` of the keys in [lower, upper) present then, in key
    order, read with the iterator `lend()` lends (over the index column family), a chunk of
    keys per loan: each loan seeks to where the last one ended, so the iterator may serve
    other reads between loans (a view's: pinned.py)."""
    resume, high = _bound(lower) or PREFIX, _bound(upper) or successor(PREFIX)
    while True:
        rows: list[tuple[bytes, bytes]] = []
        with lend() as it:
            it.seek(resume)
            for _ in range(_CHUNK):
                if not it.valid() or (high is not None and it.key() >= high):
                    break
                head = it.key()[: -_ORDER.size]
                found = answer(it, head, t_ms)
                if found is not None:
                    rows.append((_key_of(head), found))
                resume = head + _PAST
            more = it.valid() and (high is None or it.key() < high)
        yield from rows
        if not more:
            return


def _absent(version: bytes, cutoff_ms: int, ttl_ms: int | None) -> bool:
    """Whether `version`, a key's last before the cutoff, reads absent from the cutoff on:
    a tombstone, or a value expired then under `ttl_ms` (and so ever after)."""
    if version[:1] == _TOMBSTONE:
        return True
    ts = _timestamp(version)
    return ttl_ms is not None and 0 <= ts < cutoff_ms - ttl_ms


class Recorder:
    """The versions of one batch's records, put in its WriteBatch beside their values: the
    put and delete a loop fills the batch with, wrapped, in C (_entries.Versioned) when it is
    built. A put finds the record's timestamp, partition and offset in the stored bytes'
    header; a delete has only the key, so it is given them: the C loop calls each delete with
    its record's (delete_at), and the Python loop's records are read through follow(), which
    notes the one being applied (wrap)."""

    def __init__(self, wb: rocksdict.WriteBatch, handle: object) -> None:
        self._put_version, self._handle = wb.put, handle
        self._current: Record | None = None

    def follow(self, records: Records) -> Records:
        """`records`, each noted as the one being applied as the loop takes it."""
        return _Followed(records, self)

    def note(self, record: Record) -> None:
        """`record` is the one the loop applies now."""
        self._current = record

    def wrap(self, put: Put, delete: Delete) -> tuple[Put, Delete]:
        """`put` and `delete`, each also writing the version it makes; the delete's record is
        the one noted."""
        delete_at = self.delete_at(delete)

        def delete_noted(key: bytes) -> object:
            current = self._current
            if current is None or current[0] != key:
                return delete(key)
            _, _, _, p, o, ts = current
            return delete_at(key, p, o, ts)

        return self.put(put), delete_noted

    def put(self, put: Put) -> Put:
        """`put`, also writing the version it makes (none for a record it did not write:
        False, a quarantined one)."""
        put_version, handle = self._put_version, self._handle
        if _entries is not None:
            return _entries.Versioned(put, put_version, handle)
        unpack = HEADER.unpack_from

        def put_recorded(key: bytes, stored: bytes) -> object:
            written = put(key, stored)
            if written is not False:  # False: a quarantined record, the key unchanged
                _, _, _, p, o = unpack(stored)
                put_version(version_key(key, p, o), stored, handle)
            return written

        return put_recorded

    def delete_at(self, delete: Delete) -> DeleteAt:
        """`delete`, called with the record's partition, offset and timestamp, also writing
        the tombstone's version."""
        put_version, handle = self._put_version, self._handle
        if _entries is not None:
            return _entries.Versioned(delete, put_version, handle)

        def delete_recorded(key: bytes, p: int, o: int, ts: int) -> object:
            done = delete(key)
            tombstone = _TOMBSTONE + TIMESTAMP.pack(ts) + _PARTITION.pack(p)
            put_version(version_key(key, p, o), tombstone, handle)
            return done

        return delete_recorded


class _Followed:
    """A batch's records, noting each one in its recorder as it is taken."""

    def __init__(self, records: Records, recorder: Recorder) -> None:
        self._records, self._recorder = records, recorder

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        note = self._recorder.note
        for record in self._records:
            note(record)
            yield record


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

    def recorder(self, wb: rocksdict.WriteBatch) -> Recorder | None:
        """What records a batch's versions into `wb`, None without history."""
        if self._s.state.history_ms is None:
            return None
        return Recorder(wb, self._s.index_family().handle)

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: bytes, t_ms: int) -> bytes | None:
        """The stored bytes of `key` as of `t_ms` (None: absent then)."""
        index = self._s.index
        return None if index is None else version_at(index.iterator(), key, t_ms)

    def scan(
        self, lower: bytes | None, upper: bytes | None, t_ms: int
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, stored bytes) as of `t_ms` of the keys in [lower, upper) present then, in
        key order, over one point-in-time iterator (made now)."""
        index = self._s.index
        if index is None:
            return iter(())
        it = index.iterator()
        return scan_at(lambda: contextlib.nullcontext(it), lower, upper, t_ms)

    # -- the purge ---------------------------------------------------------------------------

    def purge(self, cutoff_ms: int, limit: int) -> PurgeStep:
        """Delete the versions no read at or after `cutoff_ms` can answer with, for up to
        about `limit` versions from where the sweep stands, in one batch: in each partition,
        of a key's versions with a timestamp <= cutoff_ms all but the last (which can still
        answer), and that one too when it is a tombstone and all the key has left. The
        versions that answer at the cutoff, and so the current value, stay.
        Called between applies, so no write comes between reading and deleting."""
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
            if group and entry[: -_ORDER.size] != group[0][0][: -_ORDER.size]:
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
        family = self._s.index_family()
        old = [(e, v) for e, v in group if _timestamp(v) <= cutoff_ms]
        if not old:
            return 0
        # In each partition the newest of them (the first: newest first) answers from the
        # cutoff on until a later one.
        last: dict[int, tuple[bytes, bytes]] = {}
        for e, v in old:
            last.setdefault(_partition(v), (e, v))
        drop = [e for e, v in old if last[_partition(v)][0] != e]
        # A tombstone answers "absent", and so does a value past the ttl at the cutoff (and
        # after it), which no version at all says too only when it is all the key has left.
        if len(old) == len(group) and len(last) == 1:
            ((answering, version),) = last.values()
            if _absent(version, cutoff_ms, ttl_ms):
                drop.append(answering)
        for entry in drop:
            family.delete(wb, entry)
        return len(drop)
