"""History: every version of every key inside a window, for reads as of a time.

A store with history=seconds keeps, beside each key's current value (in the data column
family: the newest version of the key, its header holding its record's timestamp, partition
and offset: codec.py), a version entry in the index column family for each value a record
replaced and for each tombstone, written in the record's WriteBatch (so a crash keeps
versions and values together, as it keeps offsets: contract 10). Layout LAYOUT (3), under
the prefix b"h" (no secondary index or time entry starts with it):

    h<escaped key>\\x00\\x00<partition: 4 bytes><offset, inverted: 8 bytes>
        a version of the key; value: the stored bytes the record wrote (codec.py: header
        with the record timestamp, partition and offset), or for a tombstone b"\\x00" +
        timestamp (8 bytes) + partition (4 bytes): no stored value starts with a zero byte

A put over a value moves the old value into the entry of its own partition and offset; a
delete does so too, and writes its tombstone's entry; a put over a tombstone or over nothing
writes no entry. Finding the old value costs a read, which a bulk restore into a store that
was empty when it began skips for the keys it has not written yet (a KeyFilter, _entries.c,
says which it may have); within a batch, the old value is the one the batch wrote last, and
the others are read with one multi-get once the batch's loop is done (Recorder). The record
that wrote the current value, applied again, moves nothing.

The key is escaped (\\x00 as \\x00\\xff) and ended with \\x00\\x00, which keeps the versions
of one key together and the keys in the data's byte order. A key's versions follow by
partition, and in each partition newest first (the offset inverted: 2**64 - 1 - offset).
Layout 1 kept them in (offset, partition) order, layout 2 kept every version (the current
value too) as an entry; a store holding either is rebuilt (shaping/history.py), and a reader
of it refuses reads as of a time (read/as_of.py).

The version as of t (ms), of the key's entries and its current value (one more version of
its partition, newer than every entry of that partition): in each partition, of the key's
versions whose record timestamp is <= t, the one with the greatest offset; of those (one per
partition the key was written to: a key moves when partitions are added), the one with the
greatest timestamp, and on a tie the greater partition. A partition whose timestamps go
backwards still gives one answer, the later record; and a key that stays in one partition
reads its current value as of any time at or after every timestamp it was given. Newest
first, a partition's answer is the first of its versions with a timestamp <= t: a read
walks from the newest version down to it, then steps (or seeks) past the partition's older
ones (answer()).

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
from globalstore.storage.index_family import IndexFamily
from globalstore.storage.keys import successor
from globalstore.storage.meta import I64, K_HISTORY, K_HISTORY_FROM, K_HISTORY_LAYOUT, Meta
from globalstore.storage.records import Delete, DeleteAt, Put, Record, Records
from globalstore.storage.state import StorageState
from globalstore.storage.written import WrittenKeys

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
    "keep_version",
    "scan_at",
    "version_at",
    "version_key",
    "walk",
]

LAYOUT = 3  # the layout of the versions this code writes and reads
PREFIX = b"h"
_END = b"\x00\x00"  # ends an escaped key
_PARTITION_AT = struct.Struct(">I")  # a version's partition, in its entry
_ORDER = struct.Struct(">IQ")  # partition, 2**64 - 1 - offset: newest first
_TOP = 2**64 - 1
_PAST = b"\xff"  # after a key's escaped form and end, sorts after all its versions
_TOMBSTONE = b"\x00"
_NO_RECORD = _TOP  # a delete's partition and offset: no stored value has them
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


def answer(it: rocksdict.RdictIter, head: bytes, t_ms: int, current: bytes | None) -> bytes | None:
    """Of the key whose entries start with `head` (PREFIX, escaped key, end), `it` standing
    on its first version (or past the key: it has none), and whose current value is
    `current` (None: it has none), the stored bytes as of `t_ms` (None: absent then, or a
    tombstone), by the rule above; leaves `it` past the key's versions. In each partition
    the first version at or before t answers (the current value, in its own, when it is),
    and the partition's older ones are stepped over (a step costs less than a seek for the
    few a key has), or, past _STEPS of them, passed with a seek. In C (_history_walk.c)
    where built."""
    if _history_walk is not None:
        return _history_walk.answer(it, head, t_ms, current)
    return walk(it, head, t_ms, current)


def walk(it: rocksdict.RdictIter, head: bytes, t_ms: int, current: bytes | None) -> bytes | None:
    """answer() in Python: where the C walk is not built, and what a test checks it
    against."""
    found: bytes | None = None
    found_ts = found_p = mine = -1  # mine: the partition the current value answers for
    unpack, tombstone, size = TIMESTAMP.unpack_from, _TOMBSTONE[0], len(head) + 4
    if current is not None and unpack(current, TIMESTAMP_AT)[0] <= t_ms:
        found, found_ts = current, unpack(current, TIMESTAMP_AT)[0]
        found_p = mine = _partition(current)
    while it.valid():
        entry = it.key()
        if entry[: len(head)] != head or len(entry) != len(head) + _ORDER.size:
            break
        p = int.from_bytes(entry[len(head) : size], "big")
        if p != mine:  # else the current value answers for it: its older ones pass
            version = it.value()
            ts = unpack(version, 1 if version[0] == tombstone else TIMESTAMP_AT)[0]
            if ts > t_ms:
                it.next()
                continue
            if found is None or ts > found_ts or (ts == found_ts and p > found_p):
                found, found_ts, found_p = version, ts, p
        partition = entry[:size]
        for _ in range(_STEPS):
            it.next()
            if not it.valid() or it.key()[:size] != partition:
                break
        else:
            it.seek(head + _PARTITION_AT.pack(p + 1))
    return None if found is None or found[0] == _TOMBSTONE[0] else found


def version_at(
    it: rocksdict.RdictIter, key: bytes, t_ms: int, current: bytes | None
) -> bytes | None:
    """The stored bytes of `key` as of `t_ms` (None: absent then), read with `it`, an
    iterator over the index column family (which it moves), and `current`, the key's value
    (None: none) at the instant `it` sees."""
    head = PREFIX + _escaped(key) + _END
    it.seek(head)
    return answer(it, head, t_ms, current)


def scan_at(
    lend: Callable[[], contextlib.AbstractContextManager[rocksdict.RdictIter]],
    values: Iterator[tuple[bytes, bytes]],
    lower: bytes | None,
    upper: bytes | None,
    t_ms: int,
) -> Iterator[tuple[bytes, bytes]]:
    """(key, stored bytes) as of `t_ms` of the keys in [lower, upper) present then, in key
    order: the current `values` (key, stored bytes) from `lower` on, merged with the version
    entries read with the iterator `lend()` lends (over the index column family, made at the
    same instant), a chunk of keys per loan: each loan seeks to where the last one ended, so
    the iterator may serve other reads between loans (a view's: pinned.py)."""
    resume, high = _bound(lower) or PREFIX, _bound(upper) or successor(PREFIX)
    now = _Values(values, upper)
    while True:
        rows: list[tuple[bytes, bytes]] = []
        with lend() as it:
            it.seek(resume)
            head = _head(it, high)
            key = None if head is None else _key_of(head)
            while len(rows) < _CHUNK:
                ahead = now.next_before(key)  # a current value with no entry comes first
                if ahead is not None:
                    if _timestamp(ahead[1]) <= t_ms:
                        rows.append(ahead)
                    continue
                if head is None or key is None:
                    break
                found = answer(it, head, t_ms, now.take(key))
                if found is not None:
                    rows.append((key, found))
                resume = head + _PAST
                head = _head(it, high)
                key = None if head is None else _key_of(head)
        yield from rows
        if len(rows) < _CHUNK:
            return


def _head(it: rocksdict.RdictIter, high: bytes | None) -> bytes | None:
    """The head (PREFIX, escaped key, end) of the entry `it` stands on, None past `high`."""
    if not it.valid() or (high is not None and it.key() >= high):
        return None
    return bytes(it.key()[: -_ORDER.size])


class _Values:
    """The current values of a scan as of a time, in key order, taken as the version entries
    reach them."""

    def __init__(self, values: Iterator[tuple[bytes, bytes]], upper: bytes | None) -> None:
        self._values, self._upper = values, upper
        self._next: tuple[bytes, bytes] | None = None
        self._step()

    def _step(self) -> None:
        got = next(self._values, None)
        self._next = got if got is None or self._upper is None or got[0] < self._upper else None

    def next_before(self, key: bytes | None) -> tuple[bytes, bytes] | None:
        """The next value, taken, if its key comes before `key` (None: after every key)."""
        n = self._next
        if n is None or (key is not None and n[0] >= key):
            return None
        self._step()
        return n

    def take(self, key: bytes) -> bytes | None:
        """The current value of `key` (None: none), the next one if it has one."""
        n = self._next
        if n is None or n[0] != key:
            return None
        self._step()
        return n[1]


def _items(it: rocksdict.RdictIter, lower: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of `it` from `lower` on (None: the first)."""
    it.seek_to_first() if lower is None else it.seek(lower)
    while it.valid():
        yield it.key(), it.value()
        it.next()


def keep_version(family: IndexFamily, wb: rocksdict.WriteBatch, key: bytes, stored: bytes) -> None:
    """`key`'s value `stored`, deleted outside the records (a ttl's purge: its reads as of a
    time judge its expiry themselves), kept as the version entry of its record."""
    _, _, _, p, o = HEADER.unpack_from(stored)
    family.put(wb, version_key(key, p, o), stored)


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
    built, and finish() once the loop is done. Each moves the value its record replaces into
    its version's entry (a delete also writes its tombstone's): the batch's own last write of
    the key, known at once, else the database's, none for a key `written` (a KeyFilter) says
    was never written, the others read by finish() with one multi-get (one call a batch,
    not a point get a record). A put finds the record's partition and offset in the
    stored bytes' header; a delete has only the key, so it is given them: the C loop calls
    each delete with its record's (delete_at), and the Python loop's records are read
    through follow(), which notes the one being applied (wrap)."""

    def __init__(
        self,
        wb: rocksdict.WriteBatch,
        handle: rocksdict.ColumnFamily,
        get_many: Callable[[list[bytes]], list[bytes | None]],
        written: _entries.KeyFilter | None,
    ) -> None:
        self._put_version, self._handle = wb.put, handle
        self._get_many, self._written = get_many, written
        self._pending: dict[bytes, bytes | None] = {}  # the batch's writes: value, or None
        # The keys whose old value is the database's: (key, partition, offset of the record
        # that replaces it), read and moved by finish().
        self._deferred: list[tuple[bytes, int, int]] = []
        self._current: Record | None = None

    def follow(self, records: Records) -> Records:
        """`records`, each noted as the one being applied as the loop takes it."""
        return _Followed(records, self)

    def note(self, record: Record) -> None:
        """`record` is the one the loop applies now."""
        self._current = record

    def wrap(self, put: Put, delete: Delete) -> tuple[Put, Delete]:
        """`put` and `delete`, each also writing the versions it makes; the delete's record
        is the one noted."""
        delete_at = self.delete_at(delete)

        def delete_noted(key: bytes) -> object:
            current = self._current
            if current is None or current[0] != key:
                return delete(key)
            _, _, _, p, o, ts = current
            return delete_at(key, p, o, ts)

        return self.put(put), delete_noted

    def put(self, put: Put) -> Put:
        """`put`, also moving the value it replaces into its version's entry (nothing for a
        record it did not write: False, a quarantined one)."""
        if _entries is not None:
            return _entries.Versioned(
                put, self._put_version, self._handle, self._pending, self._written,
                self._deferred,
            )  # fmt: skip
        unpack, pending = HEADER.unpack_from, self._pending

        def put_recorded(key: bytes, stored: bytes) -> object:
            _, _, _, p, o = unpack(stored)
            known, old = self._old(key)
            written = put(key, stored)
            if written is not False:  # False: a quarantined record, the key unchanged
                self._replaced(key, known, old, p, o)
                pending[key] = stored
            return written

        return put_recorded

    def delete_at(self, delete: Delete) -> DeleteAt:
        """`delete`, called with the record's partition, offset and timestamp, also moving
        the value it removes into its version's entry and writing the tombstone's."""
        if _entries is not None:
            return _entries.Versioned(
                delete, self._put_version, self._handle, self._pending, self._written,
                self._deferred,
            )  # fmt: skip
        put_version, handle, pending = self._put_version, self._handle, self._pending

        def delete_recorded(key: bytes, p: int, o: int, ts: int) -> object:
            known, old = self._old(key)
            done = delete(key)
            self._replaced(key, known, old, _NO_RECORD, _NO_RECORD)
            tombstone = _TOMBSTONE + TIMESTAMP.pack(ts) + _PARTITION.pack(p)
            put_version(version_key(key, p, o), tombstone, handle)
            pending[key] = None
            return done

        return delete_recorded

    def finish(self) -> None:
        """The loop is done: the old values of the keys the batch did not know, read from
        the database with one multi-get, into their versions' entries."""
        deferred = self._deferred
        if not deferred:
            return
        olds = self._get_many([key for key, _, _ in deferred])
        if _entries is not None:
            _entries.move_deferred(deferred, olds, self._put_version, self._handle)
        else:
            for (key, p, o), old in zip(deferred, olds, strict=True):
                self._move(key, old, p, o)
        deferred.clear()

    def _old(self, key: bytes) -> tuple[bool, bytes | None]:
        """(known, `key`'s value before the record now applied (None: none)); not known:
        the database's, read by finish()."""
        if key in self._pending:
            return True, self._pending[key]
        if self._written is not None and not self._written.seen_then_add([key]):
            return True, None
        return False, None

    def _replaced(self, key: bytes, known: bool, old: bytes | None, p: int, o: int) -> None:
        """The old value of `key` replaced by the record at (`p`, `o`): moved now, or read
        and moved by finish()."""
        if known:
            self._move(key, old, p, o)
        else:
            self._deferred.append((key, p, o))

    def _move(self, key: bytes, old: bytes | None, p: int, o: int) -> None:
        """`old` (None: nothing) replaced by the record at (`p`, `o`): into its version's
        entry, unless it is that record's own value, applied again."""
        if old is None:
            return
        _, _, _, old_p, old_o = HEADER.unpack_from(old)
        if (old_p, old_o) != (p, o):
            self._put_version(version_key(key, old_p, old_o), old, self._handle)


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
            lambda: contextlib.nullcontext(it), _items(values, lower), lower, upper, t_ms
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
        if not group:
            return 0
        family = self._s.index_family()
        current = self._s.get(_key_of(group[0][0][: -_ORDER.size]))
        old = [(e, v) for e, v in group if _timestamp(v) <= cutoff_ms]
        if not old:
            return 0
        # In each partition the newest of them answers from the cutoff on until a later one:
        # the current value if it is one of them (the newest of its partition), else the
        # first entry (newest first).
        last: dict[int, bytes | None] = {}
        if current is not None and _timestamp(current) <= cutoff_ms:
            last[_partition(current)] = None  # no entry: the current value answers
        for e, v in old:
            last.setdefault(_partition(v), e)
        drop = [e for e, v in old if last[_partition(v)] != e]
        # A tombstone answers "absent", and so does a value past the ttl at the cutoff (and
        # after it), which no version at all says too only when it is all the key has left.
        if current is None and len(old) == len(group) and len(last) == 1:
            ((answering, version),) = [(e, v) for e, v in old if e in last.values()]
            if _absent(version, cutoff_ms, ttl_ms):
                drop.append(answering)
        for entry in drop:
            family.delete(wb, entry)
        return len(drop)
