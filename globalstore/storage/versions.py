"""The versions of a store with history (history.py): their layout, and the walk to a key's
version as of a time.

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
the others are read with one multi-get once the batch's loop is done (version_recorder.py).
The record that wrote the current value, applied again, moves nothing.

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
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator

import rocksdict

from globalstore.codec import HEADER, HEADER_SIZE, TIMESTAMP, TIMESTAMP_AT
from globalstore.storage.index_family import IndexFamily
from globalstore.storage.keys import successor

try:
    from globalstore.storage import _history_walk
except ImportError:  # built without its C extension: the walk in Python
    _history_walk = None  # type: ignore[assignment]

__all__ = [
    "LAYOUT",
    "NO_RECORD",
    "PREFIX",
    "absent_at",
    "answer",
    "data_items",
    "head_of",
    "keep_version",
    "key_of",
    "partition_of",
    "scan_at",
    "timestamp_of",
    "tombstone",
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
NO_RECORD = _TOP  # a delete's partition and offset: no stored value has them
_PARTITION = struct.Struct(">i")
_CHUNK = 256  # keys a scan reads per turn of its iterator
_STEPS = 16  # older versions of a partition stepped over before a seek passes the rest


def _escaped(key: bytes) -> bytes:
    return key.replace(b"\x00", b"\x00\xff") if b"\x00" in key else key


def version_key(key: bytes, partition: int, offset: int) -> bytes:
    """The entry of `key`'s version written by the record at (partition, offset)."""
    return PREFIX + _escaped(key) + _END + _ORDER.pack(partition, _TOP - offset)


def key_of(head: bytes) -> bytes:
    """The data key of a key's entry head (PREFIX, escaped key, end)."""
    return head[1 : -len(_END)].replace(b"\x00\xff", b"\x00")


def _bound(key: bytes | None) -> bytes | None:
    """The entry bound of a data-key bound: every version of a key >= `key` sorts at or after
    it, every version of a smaller key before it."""
    return None if key is None else PREFIX + _escaped(key)


def partition_of(version: bytes) -> int:
    """The partition of the record that wrote `version` (stored bytes, or a tombstone's)."""
    if version[:1] == _TOMBSTONE:
        return int(_PARTITION.unpack_from(version, 1 + TIMESTAMP.size)[0])
    return int(HEADER.unpack_from(version)[3])


def timestamp_of(version: bytes) -> int:
    """The record timestamp (ms) of `version` (stored bytes, or a tombstone's); -1: none."""
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
        found_p = mine = partition_of(current)
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
            key = None if head is None else key_of(head)
            while len(rows) < _CHUNK:
                ahead = now.next_before(key)  # a current value with no entry comes first
                if ahead is not None:
                    if timestamp_of(ahead[1]) <= t_ms:
                        rows.append(ahead)
                    continue
                if head is None or key is None:
                    break
                found = answer(it, head, t_ms, now.take(key))
                if found is not None:
                    rows.append((key, found))
                resume = head + _PAST
                head = _head(it, high)
                key = None if head is None else key_of(head)
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


def data_items(it: rocksdict.RdictIter, lower: bytes | None) -> Iterator[tuple[bytes, bytes]]:
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


def absent_at(version: bytes, cutoff_ms: int, ttl_ms: int | None) -> bool:
    """Whether `version`, a key's last before the cutoff, reads absent from the cutoff on:
    a tombstone, or a value expired then under `ttl_ms` (and so ever after)."""
    if version[:1] == _TOMBSTONE:
        return True
    ts = timestamp_of(version)
    return ttl_ms is not None and 0 <= ts < cutoff_ms - ttl_ms


def head_of(entry: bytes) -> bytes:
    """The head (PREFIX, escaped key, end) of a version's entry: what all of a key's share."""
    return entry[: -_ORDER.size]


def tombstone(timestamp: int, partition: int) -> bytes:
    """A tombstone's version: its record's timestamp (ms) and partition."""
    return _TOMBSTONE + TIMESTAMP.pack(timestamp) + _PARTITION.pack(partition)
