"""Secondary indexes: GlobalStore(indexes={"by_courier": fn}), fn(key, value) -> str |
Iterable[str] | None, and store.find("by_courier", "c-17").

An index function sees each stored value as queries return it (decoded, brought to the
current value format by the converters, after the transform if there is one) and names the
index values the key is found under. Its entries live in the column family "index", beside
the data, and are written in the same WriteBatch as the values and the offsets (contract 2
holds for them too), by both restore loops: storage wraps the batch's put and delete, so
whatever loop fills the batch, the keys it wrote are indexed when the batch is committed.

Keys of the column family "index" (<id> is the index's id, 4 bytes big-endian):
    e<id><value>\\x00<key>   an entry: `key` has index value `value` (empty bytes); in value
                            order, then key order, which is the order find() answers in
    k<id><key>              the key's index values, \\x00-separated: what to delete when the
                            key changes. Reading this small entry (one multi-get per batch)
                            is cheaper and safer than reading the old value and calling the
                            function on it again: no decode, and right even if the function
                            is not deterministic
    n<id>                   how many entries the index holds (i64), for the metric

An index value may not hold a NUL character (it separates value and key); a function that
returns one, returns something else than a str, or raises, is counted and logged like a
transform failure, and the key gets no entries in that index (its old ones are deleted).

An index added to a store that holds keys (or given a new version) is built on the store
thread between follow batches, a chunk of keys at a time, from a cursor kept in its meta
entry (meta.IndexDef) and written in the same batch as the chunk: a crash resumes where it
stopped. Writes meanwhile index every key they touch, before or after the cursor, so the
built part stays right. Until built, find() raises IndexNotReady. A removed index (or the
old version of one) is deleted with range deletions in the write that drops its definition,
so it costs nothing now and RocksDB reclaims the space in its background compactions.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from globalstore.codec import Decode
from globalstore.config import IndexFn
from globalstore.storage.meta import IndexDef

log = logging.getLogger(__name__)

ENTRY, KEYS, COUNT = b"e", b"k", b"n"
_ID = struct.Struct(">I")
_SEP = b"\x00"
_FAILURES_LOGGED_PER_BATCH = 10  # an index function failing on every key must not flood the log


# -- keys of the index column family ---------------------------------------------------------


def entry_key(index_id: int, value: bytes, key: bytes) -> bytes:
    return ENTRY + _ID.pack(index_id) + value + _SEP + key


def count_key(index_id: int) -> bytes:
    return COUNT + _ID.pack(index_id)


def split_entry(entry: bytes) -> tuple[bytes, bytes]:
    """(index value, data key) of an entry (values hold no NUL: the first one after the id
    ends the value)."""
    sep = entry.index(_SEP, 5)
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
        exact = base + value.encode("utf-8") + _SEP
        return exact, exact[:-1] + b"\x01"
    lower, upper = base, ENTRY + _ID.pack(index_id + 1)
    if start is not None:
        lower = max(lower, base + start.encode("utf-8"))
    if end is not None:
        upper = min(upper, base + end.encode("utf-8"))
    if prefix:
        p = base + prefix.encode("utf-8")
        lower = max(lower, p)
        upper = min(upper, _successor(p))
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


def _successor(prefix: bytes) -> bytes:
    """Smallest byte string above every string starting with `prefix` (which starts with b"e"
    and so never is all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def encode_values(values: frozenset[bytes]) -> bytes:
    if len(values) == 1:  # the common case: one index value per key
        (value,) = values
        return value
    return _SEP.join(sorted(values))


# -- definitions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Definitions:
    """What the meta column family must say after reconciling a store with its config."""

    indexes: dict[str, IndexDef]  # every index the config names
    written: dict[str, IndexDef]  # those new or replaced: their meta entries to write
    dropped: dict[str, IndexDef]  # stored ones removed or replaced: their entries to delete
    next_id: int


def reconcile(
    stored: Mapping[str, IndexDef], next_id: int, wanted: Mapping[str, int], empty: bool
) -> Definitions:
    """The definitions for indexes {name: version} over a store holding `stored`. A new index,
    or one whose version changed, gets a new id; it is built at once in an `empty` store
    (every write indexes what it writes), else it is built from the stored values."""
    indexes: dict[str, IndexDef] = {}
    written: dict[str, IndexDef] = {}
    dropped = {n: d for n, d in stored.items() if wanted.get(n) != d.version}
    for name, version in wanted.items():
        old = stored.get(name)
        if old is not None and old.version == version:
            indexes[name] = old
            continue
        new = IndexDef(next_id, version, built=empty, cursor=None if empty else b"")
        next_id += 1
        indexes[name] = written[name] = new
    return Definitions(indexes, written, dropped, next_id)


# -- the write path --------------------------------------------------------------------------


class IndexBatch(Protocol):
    """Writes to the index column family in one WriteBatch, and reads of it as it was before
    (storage/database.py)."""

    def put(self, key: bytes, value: bytes) -> object: ...

    def delete(self, key: bytes) -> object: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...


class _Failures:
    """The keys one batch's index functions failed on: counted per index, a few logged."""

    def __init__(self, topic: str, totals: dict[str, int]) -> None:
        self.topic, self.totals, self.seen = topic, totals, 0

    def add(self, name: str | None, key: bytes, exc: Exception) -> None:
        for index in [name] if name is not None else list(self.totals):
            self.totals[index] += 1
        self.seen += 1
        if self.seen <= _FAILURES_LOGGED_PER_BATCH:
            which = f"index {name!r}" if name is not None else "every index (unreadable value)"
            log.warning(
                "%s failed on key %r of %s (%s: %s); the key has no entries in it",
                which, key.decode("utf-8", "replace"), self.topic, type(exc).__name__, exc,
            )  # fmt: skip

    def end(self) -> None:
        more = self.seen - _FAILURES_LOGGED_PER_BATCH
        if more > 0:
            log.warning("index functions failed on %d more keys of %s", more, self.topic)


class Indexer:
    """A store's index functions, and what they need: how stored values are decoded."""

    def __init__(self, fns: Mapping[str, IndexFn], decode: Decode, topic: str) -> None:
        self.fns, self.decode, self.topic = dict(fns), decode, topic
        self.failures = dict.fromkeys(self.fns, 0)  # since this start, per index

    def update(
        self, staged: Mapping[bytes, bytes | None], defs: Mapping[str, IndexDef], batch: IndexBatch
    ) -> dict[str, int]:
        """Index the keys of a batch, {key: stored bytes, None if deleted}, in the indexes
        `defs` into `batch`: delete the entries each key no longer has, put its new ones.
        Returns {index name: change in its number of entries}."""
        failures = _Failures(self.topic, self.failures)
        decoded = self._decoded(staged, failures)
        keys = list(staged)
        deltas: dict[str, int] = {}
        for name, d in defs.items():
            fn = self.fns.get(name)
            if fn is not None:
                new = self._new_values(name, fn, keys, decoded, failures)
                deltas[name] = _write_changes(d.id, keys, new, batch)
        failures.end()
        return deltas

    def _new_values(
        self,
        name: str,
        fn: IndexFn,
        keys: list[bytes],
        decoded: Mapping[bytes, Any],
        failures: _Failures,
    ) -> list[frozenset[bytes]]:
        """Each key's index values in index `name` after the batch."""
        out = []
        for key in keys:
            value = decoded.get(key, _NOTHING)
            out.append(_NONE if value is _NOTHING else self._values(name, fn, key, value, failures))
        return out

    def _decoded(
        self, staged: Mapping[bytes, bytes | None], failures: _Failures
    ) -> dict[bytes, Any]:
        """{key: value as queries return it} of the keys the batch left live and readable."""
        out: dict[bytes, Any] = {}
        decode, topic = self.decode, self.topic
        for key, raw in staged.items():
            if raw is None:
                continue
            try:
                out[key] = decode(raw, key, topic)
            except Exception as exc:  # InvalidValue, ConversionFailed: no entries anywhere
                failures.add(None, key, exc)
        return out

    def _values(
        self, name: str, fn: IndexFn, key: bytes, value: Any, failures: _Failures
    ) -> frozenset[bytes]:
        try:
            return _index_values(fn(key.decode("utf-8"), value))
        except Exception as exc:
            failures.add(name, key, exc)
            return _NONE


_NOTHING: Any = object()
_NONE: frozenset[bytes] = frozenset()


def _write_changes(
    index_id: int, keys: list[bytes], news: list[frozenset[bytes]], batch: IndexBatch
) -> int:
    """Put in `batch` the entries of index `index_id` that `keys` gain and delete those they
    lose, going from their stored values (their reverse entries) to `news`; returns the
    change in the index's number of entries. The hot loop of an indexed restore: the
    prefixes are built once, and a key that had no entry (every key of a new store) takes
    no set arithmetic."""
    entries = ENTRY + _ID.pack(index_id)  # entry_key()'s layout, its prefix built once
    reverse = [KEYS + _ID.pack(index_id) + k for k in keys]
    put, delete = batch.put, batch.delete
    delta = 0
    for key, rkey, new, old_raw in zip(keys, reverse, news, batch.get_many(reverse), strict=True):
        if old_raw is None:
            if not new:
                continue
            gone, added = _NONE, new
        else:
            old = frozenset(old_raw.split(_SEP))
            if new == old:
                continue
            gone, added = old - new, new - old
        for v in gone:
            delete(entries + v + _SEP + key)
        for v in added:
            put(entries + v + _SEP + key, b"")
        if new:
            put(rkey, encode_values(new))
        else:
            delete(rkey)
        delta += len(added) - len(gone)
    return delta


def _index_values(out: object) -> frozenset[bytes]:
    """What an index function returned, as the index values' bytes; TypeError or ValueError
    for what cannot be one."""
    if out is None:
        return _NONE
    if type(out) is str:  # the common case, without the checks an iterable needs
        encoded = out.encode("utf-8")
        if _SEP in encoded:
            raise ValueError(f"index value {out!r} holds a NUL character")
        return frozenset((encoded,))
    items = [out] if isinstance(out, str) else out
    if isinstance(items, bytes | Mapping) or not isinstance(items, Iterable):
        raise TypeError(f"an index function returns a str, an iterable of str or None, not {out!r}")
    values = set()
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"index value {item!r} is not a str")
        encoded = item.encode("utf-8")
        if _SEP in encoded:
            raise ValueError(f"index value {item!r} holds a NUL character")
        values.add(encoded)
    return frozenset(values)


# -- the build -------------------------------------------------------------------------------


class Building(Protocol):
    """What a build needs of the store's indexes (storage/index_defs.py)."""

    @property
    def defs(self) -> Mapping[str, IndexDef]: ...

    def keys_from(self, start: bytes | None, limit: int) -> list[tuple[bytes, bytes]]: ...

    def build_chunk(
        self, name: str, new: IndexDef, staged: Mapping[bytes, bytes | None]
    ) -> None: ...


class IndexBuild:
    """Builds a store's unbuilt indexes, one chunk of keys per step(), oldest index first: a
    chore of the store thread, between follow batches, so it never races an apply."""

    def __init__(self, storage: Building, chunk: int = 2_000) -> None:
        self.storage, self.chunk = storage, max(1, chunk)

    @property
    def pending(self) -> bool:
        return any(not d.built for d in self.storage.defs.values())

    def step(self) -> bool:
        """Index the next chunk of keys; True once every index is built."""
        unbuilt = [(d.id, n, d) for n, d in self.storage.defs.items() if not d.built]
        if not unbuilt:
            return True
        _, name, d = min(unbuilt)
        pairs = self.storage.keys_from(d.cursor, self.chunk)
        done = len(pairs) < self.chunk
        new = dataclasses.replace(
            d,
            built=done,
            # The smallest key after the last one indexed: where the next chunk starts.
            cursor=None if done else pairs[-1][0] + b"\x00",
            scanned=d.scanned + len(pairs),
        )
        self.storage.build_chunk(name, new, dict(pairs))
        if done:
            log.info("index %r built over %d keys", name, new.scanned)
        return not self.pending
