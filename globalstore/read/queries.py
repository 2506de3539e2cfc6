"""The read side of every store: lookups and scans over the copies of its source (source.py),
written once for the sync and the async faces and for views (view.py), which make the same
reads over one copy pinned at one instant.

Keys are str on the API and UTF-8 bytes on disk; values come back as decoded JSON. A scan
leaves out a value that does not decode and reports it (on_invalid, else a WARNING): one bad
record never ends a scan of the others; get() of its key raises InvalidValue.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, Unpack

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
from globalstore.read.as_of import lookup, moment, to_ms
from globalstore.read.as_of import scan as history_scan
from globalstore.read.copy import Copy
from globalstore.read.index_as_of import index_scan_at
from globalstore.read.protocols import AsOf, ScanFilters
from globalstore.read.skipped import skipping, warn_once
from globalstore.read.source import ReadSource
from globalstore.shaping import ttl
from globalstore.storage import keys as key_layout
from globalstore.storage.cache import NOT_KEPT
from globalstore.storage.meta import IndexDef
from globalstore.storage.quarantine import Quarantined, held
from globalstore.storage.reads import Reads

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Queries"]

_T = TypeVar("_T")
_S = TypeVar("_S", bound=ReadSource)
_Row = TypeVar("_Row")
_MISSING: Any = object()

log = logging.getLogger(__name__)


class Queries(Generic[_S]):
    """Query methods over a source's copies (source.py); the faces add start, waits, close."""

    # The time reads answer as of when they name none (epoch ms; None: now). A view as of a
    # time sets it; a store never does.
    _as_of_ms: int | None = None

    def __init__(self, source: _S) -> None:
        self._source = source
        self._closed = False

    @property
    def topic(self) -> str:
        """The topic the store holds ("" while a reader has not opened a copy yet)."""
        return self._source.topic

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self._source.path

    def _ready_storage(self) -> Reads:
        return self._source.copy().reads

    # -- point lookups -----------------------------------------------------------------------

    def get(self, key: str, default: Any = None, *, as_of: AsOf | None = None) -> Any:
        """The decoded JSON value of `key`, or `default` if absent. InvalidValue if the stored
        value cannot be decoded (it names the record it came from). `as_of` (epoch seconds or
        an aware datetime): the value the key held then (read/as_of.py); HistoryUnavailable
        for a time older than the store can answer."""
        if as_of is not None:
            return self._get_as_of(key.encode(), default, to_ms(as_of))
        k = key.encode()
        copy = self._source.copy()
        if copy.hot is not None:
            return self._get_kept(copy, k, default)
        try:
            raw = copy.lookup(k)
        except Exception as exc:
            return self._again(exc, copy, lambda: self.get(key, default))
        return default if raw is None else copy.decode(raw, k, copy.topic)

    def _get_as_of(self, k: bytes, default: Any, when: int) -> Any:
        found, past = self._past(lambda copy, t: _lookup_at(copy, k, t), when)
        return default if found is None else past.decode(found, k, past.topic)

    def _get_kept(self, copy: Copy, k: bytes, default: Any) -> Any:
        """get() through the copy's cache of decoded values (config.ValueCache)."""
        hot = copy.hot
        assert hot is not None
        value = hot.value(k, copy.reads.state.ttl_ms)
        if value is not NOT_KEPT:
            return value
        seen = hot.generation  # before the lookup: a write from then on refuses what it read
        try:
            raw = copy.lookup(k)
        except Exception as exc:
            return self._again(exc, copy, lambda: self.get(k.decode(), default))
        if raw is None:
            return default
        value = copy.decode(raw, k, copy.topic)
        hot.keep(k, seen, value, raw)
        return value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        k, when = key.encode(), self._as_of_ms
        return self._on_copy(lambda copy: _raw(copy, k, when) is not None)

    def get_entry(self, key: str, *, as_of: AsOf | None = None) -> codec.Entry | None:
        """Value plus record timestamp, partition and offset, or None if absent (as of a
        time with `as_of`, as get())."""
        k = key.encode()
        when = self._when(as_of)

        def entry(copy: Copy) -> codec.Entry | None:
            raw = _raw(copy, k, when)
            return None if raw is None else codec.decode_entry(raw, k, copy.topic, copy.decode)

        return self._on_copy(entry)

    def get_many(self, keys: Iterable[str], *, as_of: AsOf | None = None) -> dict[str, Any]:
        """{key: value} for the keys present, in the order asked (a key asked twice is
        answered once), read with one RocksDB multi-get: all at one sequence number, so the
        answer never mixes two applied batches (a loop of get can). That is what it is for:
        it is only ~1.1x as fast as that loop, since RocksDB's own lookup of each key and
        the decoding of each value, which both pay in full, are ~90 % of a get
        (docs/performance.md, "Point reads and get_many"). `as_of`: the values then, as
        get() (each key's versions read on their own)."""
        wanted = list(keys)
        encoded = [key.encode() for key in wanted]
        when = self._when(as_of)

        def many(copy: Copy) -> dict[str, Any]:
            storage, decode, topic = copy.reads, copy.decode, copy.topic
            if when is not None:
                t = _at(copy, when)
                raws = [_lookup_at(copy, k, t) for k in encoded]
            else:
                raws = storage.get_many(encoded)
            ttl_ms = storage.state.ttl_ms
            if ttl_ms is not None and when is None:
                cutoff = ttl.cutoff(ttl_ms, storage.taken_ms)
                raws = [None if r is None or ttl.is_expired(r, cutoff) else r for r in raws]
            return {
                key: decode(raw, k, topic)
                for key, k, raw in zip(wanted, encoded, raws, strict=True)
                if raw is not None
            }

        return self._on_copy(many)

    def quarantined(self, after: str | None = None, limit: int | None = None) -> list[Quarantined]:
        """The records a store with invalid_values="quarantine" did not apply, by key: those
        after the key `after`, at most `limit` of them, when given."""
        return self._on_copy(
            lambda copy: list(itertools.islice(held(copy.reads.meta_items, after), limit))
        )

    def _past(self, read: Callable[[Copy, int], _T], when: int) -> tuple[_T, Copy]:
        """`read(copy, t)` as of `when` on the copy that answers now, with that copy."""
        return self._on_copy(lambda copy: (read(copy, _at(copy, when)), copy))

    def _on_copy(self, read: Callable[[Copy], _T]) -> _T:
        """`read` on the copy that answers now; repeated on the next one if a swap closed it
        meanwhile (a switch closes the old store at once)."""
        copy = self._source.copy()
        try:
            return read(copy)
        except Exception as exc:
            return self._again(exc, copy, lambda: self._on_copy(read))

    def _again(self, exc: Exception, copy: Copy, again: Callable[[], _T]) -> _T:
        """After a read on `copy` failed with `exc`: `again()` if the store answers from
        another copy now, else what the failure means to the caller."""
        if self._moved_from(copy):
            return again()
        self._reraise(exc)

    def _moved_from(self, copy: Copy) -> bool:
        """Whether a read that failed on `copy` should be repeated: the store answers from
        another copy now."""
        return not self._closed and self._source.serving() not in (copy, None)

    def _when(self, as_of: AsOf | None) -> int | None:
        """A read's time as epoch ms, checked before any copy is read: `as_of`, else the
        time of the view it is made in (None: now)."""
        return self._as_of_ms if as_of is None else to_ms(as_of)

    # -- scans -------------------------------------------------------------------------------

    def items(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        on_invalid: OnInvalid | None = None,
        *,
        as_of: AsOf | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) in key byte order over one point-in-time view; start inclusive, end
        exclusive; `limit` counts the keys visited. A value that does not decode is left
        out and reported: on_invalid(InvalidValue), else a WARNING (ScanOptions). `as_of`:
        the keys present then, with their values then (as get()). Exhaust or close the
        iterator before close()."""
        copy, scan = self._scan(prefix, start, end, reverse, limit, as_of)  # view fixed here
        report = self._reporter(on_invalid)
        return codec.decode_items(
            self._guarded(scan), copy.topic, report, copy.decode, copy.value_format
        )

    def keys(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        *,
        as_of: AsOf | None = None,
    ) -> Iterator[str]:
        """Keys with the same filters as items()."""
        _, scan = self._scan(prefix, start, end, reverse, limit, as_of)
        return self._guarded(k.decode() for k, _ in scan)

    def values(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        on_invalid: OnInvalid | None = None,
        *,
        as_of: AsOf | None = None,
    ) -> Iterator[Any]:
        """Values with the same filters and reports as items()."""
        rows = self.items(prefix, start, end, reverse, limit, on_invalid, as_of=as_of)
        return (value for _, value in rows)

    def entries(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
        on_invalid: OnInvalid | None = None,
        *,
        as_of: AsOf | None = None,
    ) -> Iterator[codec.Entry]:
        """Entries (key, value, record timestamp, partition, offset), filtered and reported
        like items()."""
        copy, scan = self._scan(prefix, start, end, reverse, limit, as_of)
        decode, topic = copy.decode, copy.topic
        report = self._reporter(on_invalid)
        return skipping(
            self._guarded(scan),
            lambda row: codec.decode_entry(row[1], row[0], topic, decode),
            report,
        )

    def _scan(
        self,
        prefix: str | None,
        start: str | None,
        end: str | None,
        reverse: bool,
        limit: int | None,
        as_of: AsOf | None = None,
    ) -> tuple[Copy, Iterator[tuple[bytes, bytes]]]:
        """The copy a scan reads, and the scan, which that copy stays open for until it
        ends; as of a time, if given."""
        lower, upper = key_layout.key_bounds(prefix, start, end)
        when = self._when(as_of)
        opened: list[Copy] = []

        def open_scan(copy: Copy) -> Iterator[tuple[bytes, bytes]]:
            opened.append(copy)
            storage = copy.reads
            if when is not None:
                return history_scan(storage, lower, upper, reverse, _at(copy, when))
            scan = storage.scan(lower, upper, reverse)
            ttl_ms = storage.state.ttl_ms
            if ttl_ms is not None:  # expired keys are left out (ttl.py)
                scan = ttl.unexpired(scan, ttl.cutoff(ttl_ms, storage.taken_ms))
            return scan

        scan = self._guard(lambda: self._source.scan(open_scan))
        return opened[0], scan if limit is None else itertools.islice(scan, max(0, limit))

    # -- secondary indexes (indexes.py) ------------------------------------------------------

    def find(
        self,
        index: str,
        value: str | None = None,
        *,
        on_invalid: OnInvalid | None = None,
        as_of: AsOf | None = None,
        **filters: Unpack[ScanFilters],
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) of the keys whose index value is `value`, in key order; or of those
        whose index value starts with `prefix` and/or lies in [start, end), ordered by index
        value, then key. Index entries and values are read over one point-in-time view.
        UnknownIndex for an index the store does not have, IndexNotReady while it is being
        built. Values that do not decode are left out and reported as items() does, with
        the index value that led to them (InvalidValue.index_value). Exhaust or close the
        iterator before close(). As of a time (`as_of`, or a view's): the keys whose value
        then the index maps to those values, with that value, found by indexing every key's
        value then (read/index_as_of.py: the cost of a scan as of that time);
        HistoryUnavailable for a function index in a process without its function."""
        copy, scan = self._index_scan(index, value, **filters, as_of=as_of)
        return ((k, v) for _, k, v in self._matches(copy, self._guarded(scan), on_invalid))

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
        as_of: AsOf | None = None,
    ) -> Iterator[tuple[str, str, Any]]:
        """As find(), with each key's index value: (index value, key, value). `after`, an
        (index value, key) pair it returned or reported, continues past it (as a page
        cursor does)."""
        copy, scan = self._index_scan(
            index, value, prefix, start, end, reverse, limit, after, as_of=as_of
        )
        return self._matches(copy, self._guarded(scan), on_invalid)

    def _matches(
        self, copy: Copy, scan: Iterator[tuple[bytes, bytes, bytes]], on_invalid: OnInvalid | None
    ) -> Iterator[tuple[str, str, Any]]:
        decode, topic = copy.decode, copy.topic

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
        *,
        as_of: AsOf | None = None,
    ) -> tuple[Copy, Iterator[tuple[bytes, bytes, bytes]]]:
        if value is not None and (prefix is not None or start is not None or end is not None):
            raise ValueError("an index is read by either a value, or prefix/start/end, not both")
        when = self._when(as_of)
        opened: list[Copy] = []

        def open_scan(copy: Copy) -> Iterator[tuple[bytes, bytes, bytes]]:
            opened.append(copy)
            storage = copy.reads
            d = self._index_def(storage, index)
            lower, upper = key_layout.bounds(d.id, value, prefix, start, end)
            if after is not None:
                lower, upper = key_layout.past(d.id, after, lower, upper, reverse)
            if when is not None:  # from the versions: the index holds the present only
                return index_scan_at(copy, index, d, lower, upper, reverse, _at(copy, when))
            # The view is fixed here: the entries' iterator and the data's snapshot are taken.
            scan = storage.index_scan(lower, upper, reverse)
            ttl_ms = storage.state.ttl_ms
            if ttl_ms is not None:  # expired keys are left out (ttl.py)
                cutoff = ttl.cutoff(ttl_ms, storage.taken_ms)
                scan = (found for found in scan if not ttl.is_expired(found[2], cutoff))
            return scan

        scan = self._guard(lambda: self._source.scan(open_scan))  # held until it ends
        return opened[0], scan if limit is None else itertools.islice(scan, max(0, limit))

    def find_count(self, index: str, value: str, *, as_of: AsOf | None = None) -> int:
        """How many keys have index value `value` (counted over the index: one step per key;
        with a ttl, a seek per key too, to leave the expired ones out). As of a time
        (`as_of`, or a view's), counted over find()'s answer then."""
        when = self._when(as_of)

        def count(copy: Copy) -> int | None:
            storage = copy.reads
            d = self._index_def(storage, index)
            if storage.state.ttl_ms is not None or when is not None:  # counted over a scan
                return None
            lower, upper = key_layout.bounds(d.id, value)
            return storage.index_count(lower, upper)

        counted = self._on_copy(count)
        if counted is None:
            scan = self._index_scan(index, value, as_of=as_of)[1]
            return sum(1 for _ in self._guarded(scan))
        return counted

    def _stored_count(self) -> int:
        """Live keys as the store counted them, less the expired ones; counted over a scan
        when no count is stored (right after a bulk restore, before it is counted)."""
        storage = self._ready_storage()
        count = storage.state.count
        if count is None:
            return sum(1 for _ in self.keys())
        return self._unexpired_count(storage, count)

    def _unexpired_count(self, storage: Reads, count: int) -> int:
        """`count`, the stored count of live keys, less the expired ones (ttl.py): those of
        the time index below the cutoff, not purged yet. While the time index is being built
        it cannot say: the keys are counted over a scan then."""
        ttl_ms = storage.state.ttl_ms
        if ttl_ms is None:
            return count
        if storage.state.time_cursor is not None:
            return sum(1 for _ in self.keys())
        live = self._guard(lambda: storage.live_count(ttl.cutoff(ttl_ms, storage.taken_ms)))
        return count if live is None else live

    def _index_def(self, storage: Reads, index: str) -> IndexDef:
        d = storage.state.indexes.get(index)
        if d is None:
            known = ", ".join(repr(n) for n in sorted(storage.state.indexes)) or "none"
            raise UnknownIndex(f"store for {self.topic!r} has no index {index!r} (it has {known})")
        if not d.built:
            raise IndexNotReady(
                f"index {index!r} of the store for {self.topic!r} is being built "
                f"({d.scanned} keys indexed so far)"
            )
        return d

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
        as_of: AsOf | None = None,
    ) -> pa.RecordBatchReader:
        """A pyarrow RecordBatchReader of the keys items() visits, or, with `index`, of the
        keys find_matches() visits (`value`, prefix, start and end then filter index values),
        over one point-in-time view, in batches of at most `batch_rows` rows that end once
        their values reach `batch_bytes`. Columns: key, value (its JSON text, or a struct of
        the fields `schema` names), timestamp (the record's); index_value first with `index`.
        A value that does not decode, or does not fit `schema`, has no row: it is reported
        as items() does (on_invalid, else a WARNING), as the batches are read, so a caller's
        on_invalid collects the errors beside the table. `as_of`: the keys present then,
        with their values and timestamps then (as items(); with `index`, as find()). Read or
        close the reader before close(). ImportError without pyarrow."""
        reporter = self._reporter(on_invalid)
        export = arrow.Export(self.topic, codec.decode, codec.VALUE_FORMAT_VERSION, reporter,
                              schema, batch_rows, batch_bytes)  # fmt: skip
        if index is None and value is not None:
            raise ValueError("to_arrow() takes a value only with an index")
        # Bad arguments and a missing pyarrow are reported before a scan is opened.
        columns = arrow.schema(export, indexed=index is not None)
        copy: Copy
        rows: Iterator[tuple[bytes, ...]]
        if index is None:
            copy, rows = self._scan(prefix, start, end, reverse, limit, as_of)
        else:
            copy, rows = self._index_scan(
                index, value, prefix, start, end, reverse, limit, as_of=as_of
            )
        export = dataclasses.replace(
            export, topic=copy.topic, decode=copy.decode, value_format=copy.value_format
        )
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


def _at(copy: Copy, when: int) -> int:
    """`when` (ms), checked against the horizon of `copy` (read/as_of.py)."""
    return moment(copy.reads, when)


def _lookup_at(copy: Copy, key: bytes, t_ms: int) -> bytes | None:
    """The stored bytes of `key` as of `t_ms` in `copy`."""
    return lookup(copy.reads, key, t_ms)


def _raw(copy: Copy, key: bytes, when: int | None) -> bytes | None:
    """The stored bytes of `key` in `copy`: now (`when` None), or as of `when` (ms)."""
    return copy.lookup(key) if when is None else _lookup_at(copy, key, _at(copy, when))
