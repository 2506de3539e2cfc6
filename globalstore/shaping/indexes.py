"""Secondary indexes: GlobalStore(indexes={"by_courier": fn}), fn(key, value) -> str |
Iterable[str] | None, and store.find("by_courier", "c-17"). An index may also be declared by
the JSON field it reads (indexes={"by_courier": "courier"}, fields.py): the same entries as
its equivalent function, read in C.

An index function sees each stored value as queries return it (decoded, brought to the
current value format by the converters, after the transform if there is one) and names the
index values the key is found under. Its entries live in the column family "index", beside
the data, and are written in the same WriteBatch as the values and the offsets (contract 2
holds for them too), by both restore loops: storage wraps the batch's put and delete, so
whatever loop fills the batch, the keys it wrote are indexed when the batch is committed.

The keys of the column family "index" are laid out in storage/keys.py: an entry per
(index value, key), in the order find() answers in. Storage writes them from the index values
an Indexer gives it for a batch's keys, and deletes those of the keys' old values, which the
Indexer indexes again: an index function must answer the same for the same key and value.
An index value may not hold a NUL character (it separates value and key there); a function
that returns one, returns something else than a str, or raises, is counted and logged like a
transform failure, and the key gets no entries in that index (its old ones are deleted).

An index added to a store that holds keys (or given a new version) is built on the store
thread between follow batches, a chunk of keys at a time, from a cursor kept in its meta
entry (meta.IndexDef) and written in the same batch as the chunk: a crash resumes where it
stopped. Writes meanwhile index the keys they touch before the cursor, so the built part
stays right, and leave the others to the build (an index defined by an earlier globalstore,
which keeps reverse entries, indexes every key written). Until built, find() raises
IndexNotReady. A removed index (or the old version of one) is deleted with range deletions
in the write that drops its definition, so it costs nothing now and RocksDB reclaims the
space in its background compactions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from globalstore.codec import Decode
from globalstore.config import IndexFn
from globalstore.shaping.fields import field_index, native_values, path_of
from globalstore.storage.index_defs import SecondaryIndexes
from globalstore.storage.keys import SEP, KeyIndexValues
from globalstore.storage.meta import IndexDef

__all__ = ["IndexBuild", "Indexer"]

log = logging.getLogger(__name__)

_FAILURES_LOGGED_PER_BATCH = 10  # an index function failing on every key must not flood the log


# -- the index values of a batch's keys --------------------------------------------------------


class _Failures:
    """The keys one batch's index functions failed on: counted per index, a few logged."""

    def __init__(self, topic: str, totals: dict[str, int], counted: bool = True) -> None:
        self.topic, self.totals, self.seen, self.counted = topic, totals, 0, counted

    def add(self, name: str | None, key: bytes, exc: Exception) -> None:
        if not self.counted:  # a value stored before: its failures were counted then
            return
        for index in [name] if name is not None else list(self.totals):
            self.totals[index] += 1
        self.seen += 1
        # The message, not the exception (as transform.py logs it): a handler that keeps its
        # records would keep the exception's frames and the database handles they hold.
        if self.seen <= _FAILURES_LOGGED_PER_BATCH:
            which = f"index {name!r}" if name is not None else "every index (unreadable value)"
            log.warning(
                "%s failed on key %r of %s (%s: %s); the key has no entries in it",
                which, key.decode("utf-8", "replace"), self.topic, type(exc).__name__, str(exc),
            )  # fmt: skip

    def end(self) -> None:
        more = self.seen - _FAILURES_LOGGED_PER_BATCH
        if more > 0:
            log.warning("index functions failed on %d more keys of %s", more, self.topic)


class Indexer:
    """A store's index functions, and what they need: how stored values are decoded. A
    declared index (a field's path, fields.py) is read from the stored JSON in C when the
    C reader is built and the store has no converters (`fmt`: its value format; None: every
    value goes through the equivalent Python function)."""

    def __init__(
        self,
        fns: Mapping[str, IndexFn | str],
        decode: Decode,
        topic: str,
        fmt: int | None = None,
    ) -> None:
        self.fns: dict[str, IndexFn] = {
            name: field_index(fn) if isinstance(fn, str) else fn for name, fn in fns.items()
        }
        self.decode, self.topic = decode, topic
        self.native = None if fmt is None else native_values
        self.fmt = fmt or 0
        self.paths = {name: path_of(fn) for name, fn in fns.items() if isinstance(fn, str)}
        self.failures = dict.fromkeys(self.fns, 0)  # since this start, per index

    def values(
        self,
        staged: Mapping[bytes, bytes | None],
        defs: Mapping[str, IndexDef],
        before: bool = False,
    ) -> dict[str, list[KeyIndexValues]]:
        """The index values each key of a batch ({key: stored bytes, None if deleted}) has
        after it, in the order of `staged`, for each index of `defs` this store has a
        function for (storage.index_defs.IndexValues). `before`: the values are those the
        keys held before the batch, whose failures were counted and logged when written."""
        failures = _Failures(self.topic, self.failures, counted=not before)
        decoded = _Decoded(staged, self.decode, self.topic, failures)
        names = [name for name in defs if name in self.fns]
        native = self.native
        read = {name: self.paths[name] for name in names if native and name in self.paths}
        if len(read) < len(names):  # a function sees every value: decode them all once
            decoded.fill()
        keys = list(staged)
        # Every declared index in one call: each value is checked once for all of them.
        got = dict(zip(read, self._read(tuple(read.values()), staged), strict=True))
        news = {}
        for name in names:
            fn = self.fns[name]
            if name in got:
                news[name] = self._completed(name, fn, got[name], staged, decoded, failures)
            else:
                news[name] = self._new_values(name, fn, keys, decoded, failures)
        failures.end()
        return news

    def _new_values(
        self,
        name: str,
        fn: IndexFn,
        keys: list[bytes],
        decoded: _Decoded,
        failures: _Failures,
    ) -> list[KeyIndexValues]:
        """Each key's index values in index `name` after the batch."""
        out = []
        values = decoded.values
        for key in keys:
            value = values[key]
            out.append(_NONE if value is _NOTHING else self._values(name, fn, key, value, failures))
        return out

    def _read(
        self, paths: tuple[tuple[bytes, ...], ...], staged: Mapping[bytes, bytes | None]
    ) -> tuple[list[KeyIndexValues | None], ...]:
        """Per path, each key's index values read in C (None where it left the value to the
        equivalent function), one call for the batch."""
        if not paths:
            return ()
        assert self.native is not None  # paths only with the C reader
        return self.native(list(staged.values()), paths, self.fmt)

    def _completed(
        self,
        name: str,
        fn: IndexFn,
        out: list[KeyIndexValues | None],
        staged: Mapping[bytes, bytes | None],
        decoded: _Decoded,
        failures: _Failures,
    ) -> list[KeyIndexValues]:
        """`out` with the values the C reader left (rare) given by `fn`, its equivalent."""
        if None in out:
            for i, key in enumerate(staged):
                if out[i] is None:
                    value = decoded.get(key)
                    out[i] = (
                        _NONE if value is _NOTHING else self._values(name, fn, key, value, failures)
                    )
        return out  # type: ignore[return-value]  # no None left

    def _values(
        self, name: str, fn: IndexFn, key: bytes, value: Any, failures: _Failures
    ) -> KeyIndexValues:
        try:
            return _index_values(fn(key.decode("utf-8"), value))
        except Exception as exc:
            failures.add(name, key, exc)
            return _NONE


class _Decoded:
    """The values of a batch's keys as queries return them, each decoded once, when first
    needed or all at once (fill): _NOTHING for a key deleted or unreadable, which counts one
    failure in every index."""

    def __init__(
        self,
        staged: Mapping[bytes, bytes | None],
        decode: Decode,
        topic: str,
        failures: _Failures,
    ) -> None:
        self.staged, self.decode, self.topic, self.failures = staged, decode, topic, failures
        self.values: dict[bytes, Any] = {}

    def fill(self) -> None:
        for key in self.staged:
            self.get(key)

    def get(self, key: bytes) -> Any:
        value = self.values.get(key, _UNSEEN)
        if value is not _UNSEEN:
            return value
        raw, value = self.staged[key], _NOTHING
        if raw is not None:
            try:
                value = self.decode(raw, key, self.topic)
            except Exception as exc:  # InvalidValue, ConversionFailed: no entries anywhere
                self.failures.add(None, key, exc)
        self.values[key] = value
        return value


_NOTHING: Any = object()
_UNSEEN: Any = object()
_NONE: frozenset[bytes] = frozenset()


def _index_values(out: object) -> KeyIndexValues:
    """What an index function returned, as the index values' bytes (one as bytes); TypeError
    or ValueError for what cannot be one."""
    if out is None:
        return _NONE
    if type(out) is str:  # the common case, without the checks an iterable needs
        encoded = out.encode("utf-8")
        if SEP in encoded:
            raise ValueError(f"index value {out!r} holds a NUL character")
        return encoded
    items = [out] if isinstance(out, str) else out
    if isinstance(items, bytes | Mapping) or not isinstance(items, Iterable):
        raise TypeError(f"an index function returns a str, an iterable of str or None, not {out!r}")
    values = set()
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"index value {item!r} is not a str")
        encoded = item.encode("utf-8")
        if SEP in encoded:
            raise ValueError(f"index value {item!r} holds a NUL character")
        values.add(encoded)
    return frozenset(values)


# -- the build -------------------------------------------------------------------------------


class IndexBuild:
    """Builds a store's unbuilt indexes, one chunk of keys per step(), oldest index first: a
    chore of the store thread, between follow batches, so it never races an apply."""

    def __init__(self, storage: SecondaryIndexes, chunk: int = 2_000) -> None:
        self.storage, self.chunk = storage, max(1, chunk)

    @property
    def pending(self) -> bool:
        """Whether an index is still to be built."""
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
