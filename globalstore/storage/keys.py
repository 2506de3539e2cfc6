"""The byte layout of keys: the bounds of a data scan (key_bounds), and the keys of the index
column family: the secondary indexes' entries (shaping/indexes.py says what an index holds)
and the ttl's time index (shaping/ttl.py), and what a batch's keys change in them.

Secondary indexes (<id> is the index's id, 4 bytes big-endian):
    e<id><value>\\x00<key>   an entry: `key` has index value `value` (empty bytes); in value
                            order, then key order, which is the order find() answers in
    k<id><key>              the key's index values, \\x00-separated, kept only by an index
                            defined by an earlier globalstore (IndexDef.reverse): what
                            to delete when the key changes. A newer index finds them from
                            the key's old value instead (index_defs.py), which a follower
                            has read already for the live-key count: two of four writes a
                            record and a read a key less
    n<id>                   how many entries the index holds (i64), for the metric
An index value may not hold a NUL character (SEP: it separates value and key).

The time index, under the prefix b"t", which no secondary index can take:
    t<ts><key>   the key's value was written at `ts` (ms, 8 bytes big-endian): in time order,
                 so the expired keys are the entries from the start up to the cutoff
    t            how many such entries there are (i64), for status and count()
A key has exactly one entry, that of its current value, written in the same WriteBatch as
the value (timeindex.py): its previous entry is found from the old value's header (codec.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

from globalstore.codec import HEADER_SIZE, TIMESTAMP, TIMESTAMP_AT, V1

try:
    from globalstore.storage import _entries
except ImportError:  # built without its C extension: write_changes runs in Python
    _entries = None  # type: ignore[assignment]

__all__ = [
    "SEP",
    "TIME",
    "KeyIndexValues",
    "all_time_entries",
    "bounds",
    "count_key",
    "encode_values",
    "entry_key",
    "expired_range",
    "id_ranges",
    "key_bounds",
    "past",
    "split_entry",
    "split_time_key",
    "successor",
    "time_changes",
    "time_key",
    "write_changes",
    "write_entries",
]

ENTRY, KEYS, COUNT = b"e", b"k", b"n"
TIME = b"t"  # the time entries' prefix; alone, their count
SEP = b"\x00"
_ID = struct.Struct(">I")
_TS = struct.Struct(">Q")
_NONE: frozenset[bytes] = frozenset()
# A key's values in one index: one value as bytes (the common case: no set is made for it), or
# a frozenset of them (none, or several).
KeyIndexValues = bytes | frozenset[bytes]


def key_bounds(
    prefix: str | None, start: str | None, end: str | None
) -> tuple[bytes | None, bytes | None]:
    """Byte bounds [lower, upper) from a prefix and/or a start/end key range."""
    lower = None if start is None else start.encode("utf-8")
    upper = None if end is None else end.encode("utf-8")
    if prefix:
        p = prefix.encode("utf-8")
        lower = p if lower is None else max(lower, p)
        succ = successor(p)
        if succ is not None:
            upper = succ if upper is None else min(upper, succ)
    return lower, upper


def successor(prefix: bytes) -> bytes | None:
    """Smallest byte string above every string starting with `prefix` (None: no bound, when
    it is all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


# -- secondary indexes -----------------------------------------------------------------------


def entry_key(index_id: int, value: bytes, key: bytes) -> bytes:
    """The index entry of `key` under index value `value` of index `index_id`."""
    return ENTRY + _ID.pack(index_id) + value + SEP + key


def count_key(index_id: int) -> bytes:
    """The key of index `index_id`'s entry count."""
    return COUNT + _ID.pack(index_id)


def split_entry(entry: bytes) -> tuple[bytes, bytes]:
    """(index value, data key) of an entry (values hold no NUL: the first one after the id
    ends the value)."""
    sep = entry.index(SEP, 5)
    return entry[5:sep], entry[sep + 1 :]


def id_ranges(index_id: int) -> list[tuple[bytes, bytes]]:
    """[begin, end) ranges holding everything of one index: what dropping it deletes."""
    this, after = _ID.pack(index_id), _ID.pack(index_id + 1)
    return [(kind + this, kind + after) for kind in (ENTRY, KEYS, COUNT)]


def bounds(
    index_id: int,
    value: str | None = None,
    prefix: str | None = None,
    start: str | None = None,
    end: str | None = None,
) -> tuple[bytes, bytes]:
    """[lower, upper) over one index's entries: those of exactly `value`, or of index values
    starting with `prefix` and within [start, end)."""
    base = ENTRY + _ID.pack(index_id)
    if value is not None:
        exact = base + value.encode("utf-8") + SEP
        return exact, exact[:-1] + b"\x01"
    lower, upper = base, ENTRY + _ID.pack(index_id + 1)
    if start is not None:
        lower = max(lower, base + start.encode("utf-8"))
    if end is not None:
        upper = min(upper, base + end.encode("utf-8"))
    if prefix:
        p = base + prefix.encode("utf-8")
        lower = max(lower, p)
        upper = min(upper, successor(p) or upper)  # p starts with b"e": never all 0xff
    return lower, upper


def past(
    index_id: int, after: tuple[str, str], lower: bytes, upper: bytes, reverse: bool
) -> tuple[bytes, bytes]:
    """[lower, upper) narrowed to the entries after (index value, key) `after` in the order
    read: above it, or below it when reading in reverse."""
    entry = entry_key(index_id, after[0].encode("utf-8"), after[1].encode("utf-8"))
    if reverse:
        return lower, min(upper, entry)
    return max(lower, entry + b"\x00"), upper  # the smallest entry above it


def encode_values(values: frozenset[bytes]) -> bytes:
    """A key's index values as they are stored beside it, in one byte string."""
    if len(values) == 1:  # the common case: one index value per key
        (value,) = values
        return value
    return SEP.join(sorted(values))


def write_changes(
    index_id: int,
    keys: list[bytes],
    news: list[KeyIndexValues],
    get_many: Callable[[list[bytes]], list[bytes | None]],
    put: Callable[..., object],
    delete: Callable[..., object],
    handle: object = None,
    lookup: list[int] | None = None,
) -> int:
    """Put the entries of index `index_id` that `keys` gain and delete those they lose,
    going from their stored values (their reverse entries, read with one `get_many`) to
    `news`; returns the change in the index's number of entries. `lookup`: the positions in
    `keys` of the only keys that may have stored values (None: any may; KeyFilter). `put`
    and `delete` are a WriteBatch's, given the column family `handle` as last argument
    (None: none given); the entries go in in key order, which RocksDB's memtable inserts
    fastest (_entries.c). The hot loop of an indexed restore: in C (_entries.c) where built,
    which writes the same entries in the same order."""
    entries = ENTRY + _ID.pack(index_id)  # entry_key()'s layout, its prefix built once
    reverse = KEYS + _ID.pack(index_id)
    if _entries is not None:
        return int(
            _entries.write_changes(entries, reverse, keys, news, get_many, lookup, encode_values,
                                   put, delete, handle)
        )  # fmt: skip
    if handle is not None:
        put_in, delete_in = put, delete
        put = lambda k, v: put_in(k, v, handle)  # noqa: E731
        delete = lambda k: delete_in(k, handle)  # noqa: E731
    reverses = [reverse + k for k in keys]
    if lookup is None:
        olds = get_many(reverses)
    else:
        olds = [None] * len(keys)
        for i, old in zip(lookup, get_many([reverses[i] for i in lookup]), strict=True):
            olds[i] = old
    return _write_changes(entries, keys, reverses, news, olds, put, delete)


def write_entries(
    index_id: int,
    keys: list[bytes],
    news: list[KeyIndexValues],
    olds: list[KeyIndexValues | None],
    put: Callable[..., object],
    delete: Callable[..., object],
) -> int:
    """Put the entries of index `index_id` that `keys` gain and delete those they lose,
    going from `olds` (each key's index values before the batch, None: it had none) to
    `news`, for an index that keeps no reverse entries; returns the change in its number
    of entries. `put` and `delete` as write_changes's, without a column family."""
    entries = ENTRY + _ID.pack(index_id)
    if _entries is not None:
        return int(_entries.write_entries(entries, keys, news, olds, put, delete, None))
    return _write_changes(entries, keys, None, news, olds, put, delete)


def _write_changes(
    entries: bytes,
    keys: list[bytes],
    reverse: list[bytes] | None,
    news: list[KeyIndexValues],
    olds: Sequence[KeyIndexValues | None],
    put: Callable[..., object],
    delete: Callable[..., object],
) -> int:
    """write_changes and write_entries in Python (where the C module is not built); an old
    value as bytes is one value or, read from a reverse entry (`reverse`: theirs, None: the
    index keeps none), several SEP-joined. A key that had no entry (every key of a new
    store) takes no set arithmetic."""
    delta = 0
    changes: list[tuple[bytes, bytes | None]] = []  # (entry, value; None: delete it)
    for i, (key, one_or_set, old_raw) in enumerate(zip(keys, news, olds, strict=True)):
        new = frozenset((one_or_set,)) if isinstance(one_or_set, bytes) else one_or_set
        if old_raw is None:
            if not new:
                continue
            gone, added = _NONE, new
        else:
            old = old_raw if isinstance(old_raw, frozenset) else frozenset(old_raw.split(SEP))
            if new == old:
                continue
            gone, added = old - new, new - old
        changes += [(entries + v + SEP + key, None) for v in gone]
        changes += [(entries + v + SEP + key, b"") for v in added]
        if reverse is not None:
            changes.append((reverse[i], encode_values(new) if new else None))
        delta += len(added) - len(gone)
    changes.sort(key=lambda change: change[0])  # distinct entries: the key decides
    for entry, value in changes:
        if value is None:
            delete(entry)
        else:
            put(entry, value)
    return delta


# -- the time index --------------------------------------------------------------------------


def time_key(ts: int, key: bytes) -> bytes:
    """The time-index entry of `key`, written at `ts` (ms)."""
    return TIME + _TS.pack(ts) + key


def split_time_key(entry: bytes) -> tuple[int, bytes]:
    """(timestamp ms, data key) of a time entry."""
    return _TS.unpack_from(entry, 1)[0], entry[1 + _TS.size :]


def expired_range(cutoff: int) -> tuple[bytes, bytes]:
    """[lower, upper) of the time entries written before `cutoff` (ms)."""
    return TIME + _TS.pack(0), TIME + _TS.pack(max(0, cutoff))


def all_time_entries() -> tuple[bytes, bytes]:
    """[begin, end) holding the whole time index, its count included: what dropping it
    deletes."""
    return TIME, TIME[:-1] + bytes([TIME[-1] + 1])


def time_changes(
    keys: list[bytes], olds: list[bytes | None], news: Mapping[bytes, bytes | None]
) -> tuple[list[bytes], list[bytes]]:
    """(entries to delete, entries to put) for the keys a batch wrote, given their old
    stored bytes and {key: new stored bytes, None if deleted}. An unchanged timestamp
    deletes nothing. codec.record_timestamp() inlined: this runs for every key a batch
    writes."""
    deletes, puts = [], []
    unpack, size, at = TIMESTAMP.unpack_from, HEADER_SIZE, TIMESTAMP_AT
    for key, old in zip(keys, olds, strict=True):
        new = news[key]
        old_ts = unpack(old, at)[0] if old is not None and len(old) >= size and old[0] == V1 else -1
        new_ts = unpack(new, at)[0] if new is not None and len(new) >= size and new[0] == V1 else -1
        if old_ts == new_ts:
            continue
        if old_ts >= 0:  # a negative timestamp is none (UNKNOWN): it has no entry
            deletes.append(time_key(old_ts, key))
        if new_ts >= 0:
            puts.append(time_key(new_ts, key))
    return deletes, puts
