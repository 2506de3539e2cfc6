"""The read side of a store: lookups and scans over a Storage, shared by GlobalStore (which
restores and follows) and ReadOnlyStore (which only opens what a running store has written).

Keys are str on the API and UTF-8 bytes on disk; values come back as decoded JSON. A scan
leaves out a value that does not decode and reports it (on_invalid, else a WARNING): one bad
record never ends a scan of the others; get() of its key raises InvalidValue.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, Unpack

from globalstore import codec
from globalstore.codec import OnInvalid
from globalstore.errors import (
    GlobalStoreError,
    IndexNotReady,
    InvalidValue,
    StorageError,
    StoreClosed,
    UnknownIndex,
)
from globalstore.read import arrow
from globalstore.read.copy import Copy
from globalstore.read.protocols import ScanFilters
from globalstore.read.skipped import skipping, warn_once
from globalstore.shaping import ttl
from globalstore.storage import Storage
from globalstore.storage import keys as index_keys
from globalstore.storage.meta import IndexDef
from globalstore.storage.quarantine import Quarantined, held

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["StoreQueries", "StoreReads"]

_T = TypeVar("_T")
_Row = TypeVar("_Row")
_MISSING: Any = object()

log = logging.getLogger(__name__)


class StoreReads:
    """Query methods over `_copy()`; subclasses say which copy answers and when."""

    topic: str
    path: Path
    _closed: bool = False
    # codec.decode, or one that converts older value formats (converters.decoder).
    _decode: codec.Decode = staticmethod(codec.decode)
    # The value format queries answer in: stored JSON of this format needs no conversion.
    _value_format: int = codec.VALUE_FORMAT_VERSION

    def _copy(self) -> Copy:
        """The copy that answers now; StoreNotReady or StoreClosed when none may."""
        raise NotImplementedError

    def _ready_storage(self) -> Storage:
        return self._copy().storage

    # -- point lookups -----------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The decoded JSON value of `key`, or `default` if absent. InvalidValue if the stored
        value cannot be decoded (it names the record it came from)."""
        k = key.encode()
        raw = self._fetch(k)
        return default if raw is None else self._decode(raw, k, self.topic)

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._fetch(key.encode()) is not None

    def get_entry(self, key: str) -> codec.Entry | None:
        """Value plus record timestamp, partition and offset, or None if absent."""
        k = key.encode()
        raw = self._fetch(k)
        return None if raw is None else codec.decode_entry(raw, k, self.topic, self._decode)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """{key: value} for the keys present, in the order asked (a key asked twice is
        answered once), read with one RocksDB multi-get: all at one sequence number, so the
        answer never mixes two applied batches (a loop of get can). That is what it is for:
        it is only ~1.1x as fast as that loop, since RocksDB's own lookup of each key and
        the decoding of each value, which both pay in full, are ~90 % of a get
        (docs/performance.md, "Point reads and get_many")."""
        wanted = list(keys)
        encoded = [key.encode() for key in wanted]
        storage = self._ready_storage()
        raws = self._guard(lambda: storage.get_many(encoded))
        decode, topic = self._decode, self.topic
        ttl_ms = storage.state.ttl_ms
        if ttl_ms is not None:
            cutoff = ttl.cutoff(ttl_ms)
            raws = [None if r is None or ttl.is_expired(r, cutoff) else r for r in raws]
        return {
            key: decode(raw, k, topic)
            for key, k, raw in zip(wanted, encoded, raws, strict=True)
            if raw is not None
        }

    def quarantined(self, after: str | None = None, limit: int | None = None) -> list[Quarantined]:
        """The records a store with invalid_values="quarantine" did not apply, by key: those
        after the key `after`, at most `limit` of them, when given."""
        storage = self._ready_storage()
        return self._guard(lambda: list(itertools.islice(held(storage.meta_items, after), limit)))

    def _fetch(self, key: bytes) -> bytes | None:
        try:
            return self._copy().lookup(key)
        except Exception as exc:
            self._reraise(exc)

    # -- scans -------------------------------------------------------------------------------

    def items(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        on_invalid: OnInvalid | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) in key byte order over one point-in-time view; start inclusive, end
        exclusive; `limit` counts the keys visited. A value that does not decode is left
        out and reported: on_invalid(InvalidValue), else a WARNING (ScanOptions). Exhaust
        or close the iterator before close()."""
        scan = self._guarded(self._scan(prefix, start, end, reverse, limit))  # view fixed here
        return codec.decode_items(
            scan, self.topic, self._reporter(on_invalid), self._decode, self._value_format
        )

    def keys(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[str]:
        """Keys with the same filters as items()."""
        scan = self._scan(prefix, start, end, reverse, limit)
        return self._guarded(k.decode() for k, _ in scan)

    def values(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        on_invalid: OnInvalid | None = None,
    ) -> Iterator[Any]:
        """Values with the same filters and reports as items()."""
        return (value for _, value in self.items(prefix, start, end, reverse, limit, on_invalid))

    def entries(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        on_invalid: OnInvalid | None = None,
    ) -> Iterator[codec.Entry]:
        """Entries (key, value, record timestamp, partition, offset), filtered and reported
        like items()."""
        scan = self._guarded(self._scan(prefix, start, end, reverse, limit))
        decode, topic = self._decode, self.topic
        report = self._reporter(on_invalid)
        return skipping(scan, lambda row: codec.decode_entry(row[1], row[0], topic, decode), report)

    def _scan(
        self,
        prefix: str | None,
        start: str | None,
        end: str | None,
        reverse: bool,
        limit: int | None,
    ) -> Iterator[tuple[bytes, bytes]]:
        lower, upper = index_keys.key_bounds(prefix, start, end)
        storage = self._ready_storage()
        scan = storage.scan(lower, upper, reverse)
        ttl_ms = storage.state.ttl_ms
        if ttl_ms is not None:  # expired keys are left out (ttl.py)
            scan = ttl.unexpired(scan, ttl.cutoff(ttl_ms))
        return scan if limit is None else itertools.islice(scan, max(0, limit))

    # -- secondary indexes (indexes.py) ------------------------------------------------------

    def find(
        self,
        index: str,
        value: str | None = None,
        *,
        on_invalid: OnInvalid | None = None,
        **filters: Unpack[ScanFilters],
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) of the keys whose index value is `value`, in key order; or of those
        whose index value starts with `prefix` and/or lies in [start, end), ordered by index
        value, then key. Index entries and values are read over one point-in-time view.
        UnknownIndex for an index the store does not have, IndexNotReady while it is being
        built. Values that do not decode are left out and reported as items() does, with
        the index value that led to them (InvalidValue.index_value). Exhaust or close the
        iterator before close()."""
        scan = self._guarded(self._index_scan(index, value, **filters))
        return ((k, v) for _, k, v in self._matches(scan, on_invalid))

    def find_matches(
        self,
        index: str,
        value: str | None = None,
        *,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
        on_invalid: OnInvalid | None = None,
    ) -> Iterator[tuple[str, str, Any]]:
        """As find(), with each key's index value: (index value, key, value). `after`, an
        (index value, key) pair it returned or reported, continues past it (as a page
        cursor does)."""
        scan = self._index_scan(index, value, prefix, start, end, reverse, limit, after)
        return self._matches(self._guarded(scan), on_invalid)

    def _matches(
        self, scan: Iterator[tuple[bytes, bytes, bytes]], on_invalid: OnInvalid | None
    ) -> Iterator[tuple[str, str, Any]]:
        decode, topic = self._decode, self.topic

        def read(row: tuple[bytes, bytes, bytes]) -> tuple[str, str, Any]:
            index_value, k, raw = row
            try:
                return index_value.decode(), k.decode(), decode(raw, k, topic)
            except InvalidValue as exc:
                exc.index_value = index_value.decode()
                raise

        return skipping(scan, read, self._reporter(on_invalid))

    def _index_scan(
        self,
        index: str,
        value: str | None,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
    ) -> Iterator[tuple[bytes, bytes, bytes]]:
        if value is not None and (prefix is not None or start is not None or end is not None):
            raise ValueError("an index is read by either a value, or prefix/start/end, not both")
        storage, d = self._index_def(index)
        lower, upper = index_keys.bounds(d.id, value, prefix, start, end)
        if after is not None:
            lower, upper = index_keys.past(d.id, after, lower, upper, reverse)
        # The view is fixed here: the entries' iterator and the data's snapshot are taken now.
        scan = self._guard(lambda: storage.index_scan(lower, upper, reverse))
        ttl_ms = storage.state.ttl_ms
        if ttl_ms is not None:  # expired keys are left out (ttl.py)
            cutoff = ttl.cutoff(ttl_ms)
            scan = (found for found in scan if not ttl.is_expired(found[2], cutoff))
        return scan if limit is None else itertools.islice(scan, max(0, limit))

    def find_count(self, index: str, value: str) -> int:
        """How many keys have index value `value` (counted over the index: one step per key;
        with a ttl, a seek per key too, to leave the expired ones out)."""
        storage, d = self._index_def(index)
        if storage.state.ttl_ms is not None:  # the scan leaves expired keys out; nothing decoded
            return sum(1 for _ in self._guarded(self._index_scan(index, value)))
        lower, upper = index_keys.bounds(d.id, value)
        return self._guard(lambda: storage.index_count(lower, upper))

    def _unexpired_count(self, storage: Storage, count: int) -> int:
        """`count`, the stored count of live keys, less the expired ones (ttl.py): those of
        the time index below the cutoff, not purged yet. While the time index is being built
        it cannot say: the keys are counted over a scan then."""
        ttl_ms = storage.state.ttl_ms
        if ttl_ms is None:
            return count
        if storage.state.time_cursor is not None:
            return sum(1 for _ in self.keys())
        live = self._guard(lambda: storage.time.live_count(ttl.cutoff(ttl_ms)))
        return count if live is None else live

    def _index_def(self, index: str) -> tuple[Storage, IndexDef]:
        storage = self._ready_storage()
        d = storage.state.indexes.get(index)
        if d is None:
            known = ", ".join(repr(n) for n in sorted(storage.state.indexes)) or "none"
            raise UnknownIndex(f"store for {self.topic!r} has no index {index!r} (it has {known})")
        if not d.built:
            raise IndexNotReady(
                f"index {index!r} of the store for {self.topic!r} is being built "
                f"({d.scanned} keys indexed so far)"
            )
        return storage, d

    # -- Apache Arrow (arrow.py) -------------------------------------------------------------

    def to_arrow(
        self,
        *,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        index: str | None = None,
        value: str | None = None,
        schema: pa.Schema | pa.StructType | None = None,
        batch_rows: int = arrow.BATCH_ROWS,
        batch_bytes: int = arrow.BATCH_BYTES,
        on_invalid: OnInvalid | None = None,
    ) -> pa.RecordBatchReader:
        """A pyarrow RecordBatchReader of the keys items() visits, or, with `index`, of the
        keys find_matches() visits (`value`, prefix, start and end then filter index values),
        over one point-in-time view, in batches of at most `batch_rows` rows that end once
        their values reach `batch_bytes`. Columns: key, value (its JSON text, or a struct of
        the fields `schema` names), timestamp (the record's); index_value first with `index`.
        A value that does not decode, or does not fit `schema`, has no row: it is reported
        as items() does (on_invalid, else a WARNING), as the batches are read, so a caller's
        on_invalid collects the errors beside the table. Read or close the reader before
        close(). ImportError without pyarrow."""
        reporter = self._reporter(on_invalid)
        export = arrow.Export(self.topic, self._decode, self._value_format, reporter, schema,
                              batch_rows, batch_bytes)  # fmt: skip
        if index is None and value is not None:
            raise ValueError("to_arrow() takes a value only with an index")
        # Bad arguments and a missing pyarrow are reported before a scan is opened.
        columns = arrow.schema(export, indexed=index is not None)
        rows: Iterator[tuple[bytes, ...]]
        if index is None:
            rows = self._scan(prefix, start, end, reverse, limit)
        else:
            rows = self._index_scan(index, value, prefix, start, end, reverse, limit)
        return arrow.reader(self._guarded(rows), columns, export)

    # -- errors ------------------------------------------------------------------------------

    def _reporter(self, on_invalid: OnInvalid | None) -> OnInvalid:
        """What a scan does with a value it leaves out: the caller's on_invalid, else log."""
        if on_invalid is not None:
            return on_invalid
        path = self.path
        return lambda exc: warn_once(path, exc)

    def _guarded(self, it: Iterator[_T]) -> Iterator[_T]:
        try:
            yield from it
        except Exception as exc:
            self._reraise(exc)

    def _guard(self, read: Callable[[], _T]) -> _T:
        try:
            return read()
        except Exception as exc:
            self._reraise(exc)

    def _reraise(self, exc: Exception) -> NoReturn:
        """Raise what a failed read means to the caller: rocksdict raises bare Exceptions,
        both for a read racing close() and for RocksDB's own read errors (damage, I/O)."""
        if self._closed:
            raise StoreClosed(f"store for {self.topic!r} was closed") from exc
        if isinstance(exc, GlobalStoreError):
            raise exc
        raise StorageError(f"RocksDB read failed in {self.path}: {exc}") from exc


class StoreQueries(StoreReads):
    """The queries of a face that closes as a plain call (`with store:`); the asyncio faces
    (aio.py) close with an await."""

    def close(self) -> None:
        """Each store face closes what it holds; NotImplementedError here."""
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
