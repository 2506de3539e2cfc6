"""What every store face promises: the StoreReader protocol and the StoreStatus it reports.

Every store (stores/store.py: GlobalStore, SharedStore, ReadOnlyStore, SwitchingStore, and
their asyncio faces' `sync`) implements StoreReader and FollowingStore, which is what the HTTP
server serves; a store's view() is a StoreView.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypedDict, Unpack

from globalstore.codec import Entry, OnInvalid
from globalstore.status import Delays, Progress, State
from globalstore.storage.quarantine import Quarantined

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ArrowOptions",
    "AsOf",
    "FollowingStore",
    "HistoryStatus",
    "IndexStatus",
    "KeyReads",
    "ScanFilters",
    "ScanOptions",
    "StoreReader",
    "StoreStatus",
    "StoreView",
    "TtlStatus",
    "behind",
    "check_partitions",
    "freshness",
    "partition_offsets",
    "reaches",
    "serving",
]

# A read's time: epoch seconds, or an aware datetime (read/as_of.py).
AsOf = float | int | dt.datetime


@dataclass(frozen=True)
class IndexStatus:
    """One secondary index (indexes.py), as of the last batch the store applied."""

    ready: bool  # built: find() answers
    version: int
    entries: int  # (key, index value) pairs it holds
    indexed_keys: int | None  # while it is being built: keys indexed so far, else None
    failures: int = 0  # since this start: keys its function failed on (logged)


@dataclass(frozen=True)
class TtlStatus:
    """A store with a time to live (ttl.py), as of the last batch the store applied."""

    seconds: float
    # Keys the time index holds (those with a record timestamp), expired ones not purged yet
    # included: after a purge it is the live keys that can expire.
    time_index_entries: int
    time_index_ready: bool  # False while it is built from the stored values
    purged: int = 0  # since this start: expired keys deleted from disk (the writer only)


@dataclass(frozen=True)
class HistoryStatus:
    """A store that keeps versions for reads as of a time (storage/history.py)."""

    seconds: float  # the window
    # The oldest time (epoch seconds) a read as of a time can ask for now: the window's
    # start, or later while the versions are complete only since the store's restore or
    # resume (complete_from).
    oldest: float
    complete_from: float | None


@dataclass(frozen=True)
class StoreStatus:
    """A point-in-time report, cheap enough to poll for health checks."""

    topic: str
    path: str  # the directory of the copy that answers (<path>/rebuild after a heal)
    state: State
    ready: bool
    position: dict[int, int]
    lag: dict[int, int]
    key_count: int | None
    layout_version: int
    last_restore_at: float | None  # wall-clock seconds since the epoch
    connected: bool
    staleness_seconds: float | None  # since the store last knew it held the topic's end
    last_error: str | None
    rebuild_reason: str | None = None  # why this start rebuilt the store from the beginning
    skipped_records: int = 0  # since this start: records whose key is not UTF-8 (logged)
    migration: str | None = None  # the background conversion under way, e.g. "layout 0 -> 1"
    migrated_values: int = 0  # values it rewrote since this start
    conversion_failures: int = 0  # since this start: values a converter raised on (kept)
    transform_failures: int = 0  # since this start: records the transform raised on (logged)
    self_heals: int = 0  # since this start: rebuilds beside the store that it switched to
    # A SharedStore: what its writer has applied that it does not show yet (else None).
    behind_writer: dict[int, int] | None = None
    # A SharedStore, since start(): datagrams on its wake socket that were not a note from
    # its writer (another user's, malformed, a live copy outside the store...), dropped.
    refused_notes: int = 0
    # State "failed": the type of the error that stopped the store (last_error says it all),
    # e.g. "StorageError" for a full disk. Queries still answer from what it holds.
    failure: str | None = None
    # Secondary indexes by name (empty without): built or not, entries, failures.
    indexes: dict[str, IndexStatus] = field(default_factory=dict)
    ttl: TtlStatus | None = None  # None: no time to live
    history: HistoryStatus | None = None  # None: no history kept
    # Held the topic's end within the last max_staleness seconds (at this instant, without a
    # bound): a store that knows it is further behind is never fresh.
    fresh: bool = False
    # Restored, but it last held the topic's end longer ago than its max_staleness: why (it
    # is then not `ready`, and /readyz answers 503). None otherwise.
    stale: str | None = None
    # invalid_values="quarantine": the keys whose latest record did not decode (quarantined()).
    quarantined: int = 0
    # Keys whose latest record's value does not decode: stored as it came (invalid_values=
    # "store"; a get of one raises InvalidValue) or held in the quarantine. Exact: counted in
    # each value's write batch. None: not counted (a store written before the count existed,
    # until it is rebuilt), or not yet (after a bulk restore, until the pass over the values
    # that counts them ends, as key_count).
    undecodable: int | None = None
    # While a restore, a rebuild or a migration runs: done, left, rate and ETA (else None).
    progress: Progress | None = None
    # Following: how long its records took from their timestamp to being applied (a face
    # that follows nothing itself: None).
    record_delays: Delays | None = None
    # A reader process (SharedStore, serve --workers): how long the records its writer
    # applied took from their timestamp to this reader showing them (else None).
    visible_delays: Delays | None = None


def freshness(
    staleness: float | None, connected: bool, lag: Mapping[int, int], bound: float | None
) -> tuple[bool, str | None]:
    """(fresh, why it is past `bound`) of a store that last held the topic's end `staleness`
    seconds ago (None: never since it started following). Without a bound, fresh only while
    it holds the end, and no reason is given."""
    if staleness is not None and staleness <= (bound or 0.0):
        return True, None
    if bound is None:
        return False, None
    if staleness is None:
        return False, "it has not held the topic's end since it started following"
    why = f"it last knew it held the topic's end {staleness:.1f} s ago (max_staleness {bound:g} s)"
    behind = sum(lag.values())
    if behind:
        why += f"; {behind} records behind the end as last known"
    return False, why if connected else f"{why}; not connected to the broker"


def serving(status: StoreStatus) -> bool:
    """Restored and answering: ready, or ready but for its max_staleness."""
    return status.ready or status.stale is not None


def behind(ahead: Mapping[int, int], positions: Mapping[int, int]) -> dict[int, int]:
    """Per partition of `ahead` (in order): the records `positions` lacks to reach it."""
    return {p: max(0, o - positions.get(p, 0)) for p, o in sorted(ahead.items())}


def reaches(positions: Mapping[int, int], wanted: Mapping[int, int]) -> bool:
    """True when `positions` is at least `wanted` in every partition `wanted` names."""
    return all(positions.get(p, 0) >= o for p, o in wanted.items())


def partition_offsets(position: Mapping[int, int] | Mapping[str, int]) -> dict[int, int]:
    """`position` ({partition: offset}) with int partitions; a partition may be given as a
    string of digits too, as /v1/status and JSON name it. ValueError for any other key."""
    wanted = {}
    for partition, offset in position.items():
        if isinstance(partition, str) and partition.isascii() and partition.isdigit():
            wanted[int(partition)] = offset
        elif isinstance(partition, int) and not isinstance(partition, bool):
            wanted[partition] = offset
        else:
            raise ValueError(
                f"a position names partitions by number (0, 1, ... or '0', '1', ...), "
                f"not {partition!r}"
            )
    return wanted


def check_partitions(wanted: Iterable[int], known: Collection[int], topic: str) -> None:
    """ValueError if `wanted` names a partition the topic does not have, as far as `known`
    (the partitions the store follows) tells: nothing is checked while it is empty."""
    missing = sorted(set(wanted) - set(known))
    if known and missing:
        has = ", ".join(str(p) for p in sorted(known))
        raise ValueError(f"topic {topic!r} has no partition {missing[0]} (it has {has})")


class ScanFilters(TypedDict, total=False):
    """Which keys a scan visits: a prefix and/or [start, end), in key byte order or reversed,
    at most `limit` of them."""

    prefix: str | None
    start: str | None
    end: str | None
    reverse: bool
    limit: int | None


class ScanOptions(ScanFilters, total=False):
    """A scan that decodes values: its filters, and what it does with a value that does not
    decode (or that a converter raises on). Such a value is always left out, never the end of
    the scan: `on_invalid` is called with its InvalidValue (which names key, partition,
    offset and reason), in scan order, in the thread reading the scan; what it raises ends
    the scan. Without it, the store logs a WARNING the first time it leaves a record out."""

    on_invalid: OnInvalid | None


class ArrowOptions(ScanOptions, total=False):
    """What to_arrow() reads (the keys, or with `index` the index values, that the filters
    select) and how (a struct value column of `schema`'s fields, the batch bounds)."""

    index: str | None
    value: str | None
    schema: pa.Schema | pa.StructType | None
    batch_rows: int
    batch_bytes: int


class KeyReads(Protocol):
    """The reads of keys a store and its views answer. A scan reads one point-in-time view."""

    @property
    def topic(self) -> str:
        """The Kafka topic the store holds."""

    def get(self, key: str, default: Any = None, *, as_of: AsOf | None = None) -> Any:
        """The decoded value of `key`, or `default` if absent; InvalidValue if the stored value does
        not decode. `as_of` (epoch seconds or an aware datetime): the value then, in a store
        with history; HistoryUnavailable for a time it cannot answer."""

    def __getitem__(self, key: str) -> Any: ...

    def __contains__(self, key: object) -> bool: ...

    def get_entry(self, key: str, *, as_of: AsOf | None = None) -> Entry | None:
        """Value plus record timestamp, partition and offset, or None if absent."""

    def get_many(self, keys: Iterable[str], *, as_of: AsOf | None = None) -> dict[str, Any]:
        """{key: value} for the keys present, in the order asked, all read at one instant."""

    def items(
        self, *, as_of: AsOf | None = None, **filters: Unpack[ScanOptions]
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) in key byte order over one point-in-time view, as ScanOptions filter it; a
        value that does not decode is left out and reported."""

    def keys(self, *, as_of: AsOf | None = None, **filters: Unpack[ScanFilters]) -> Iterator[str]:
        """Keys with the same filters as items()."""

    def values(self, *, as_of: AsOf | None = None, **filters: Unpack[ScanOptions]) -> Iterator[Any]:
        """Values with the same filters and reports as items()."""

    def entries(
        self, *, as_of: AsOf | None = None, **filters: Unpack[ScanOptions]
    ) -> Iterator[Entry]:
        """Entries (key, value, record timestamp, partition, offset), filtered and reported like
        items()."""

    def find(
        self,
        index: str,
        value: str | None = None,
        *,
        as_of: AsOf | None = None,
        **filters: Unpack[ScanOptions],
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) of the keys whose index value is `value` (key order), or, without it, whose
        index value the filters select (index value order, then key); as of a time with
        `as_of`, from the values then."""

    def find_matches(
        self,
        index: str,
        value: str | None = None,
        *,
        after: tuple[str, str] | None = None,
        as_of: AsOf | None = None,
        **filters: Unpack[ScanOptions],
    ) -> Iterator[tuple[str, str, Any]]:
        """As find(), with each key's index value: (index value, key, value); `after`, a pair it
        returned, continues past it."""

    def find_count(self, index: str, value: str, *, as_of: AsOf | None = None) -> int:
        """How many keys have index value `value` (then, with `as_of`)."""

    def to_arrow(self, **options: Unpack[ArrowOptions]) -> pa.RecordBatchReader:
        """A pyarrow RecordBatchReader of the keys items() visits, or, with `index`, of those
        find_matches() visits."""

    def count(self) -> int:
        """Number of live keys."""

    def quarantined(self, after: str | None = None, limit: int | None = None) -> list[Quarantined]:
        """The records a store with invalid_values="quarantine" did not apply, by key: those
        after the key `after`, at most `limit` of them, when given."""


class _ClosedOnExit(Protocol):
    """Used with `with`, which calls close() at its end."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class StoreView(KeyReads, _ClosedOnExit, Protocol):
    """One consistent view of a store for several reads (StoreReader.view()): each answers
    from the store as it was at one instant, and as of the view's time when it has one."""

    @property
    def as_of(self) -> float | None:
        """The time its reads answer as of (epoch seconds); None: the instant it was taken."""

    def close(self) -> None:
        """Let go of the store's copy as it was. Idempotent."""


class StoreReader(KeyReads, _ClosedOnExit, Protocol):
    """The queries every store face answers."""

    def view(self, as_of: AsOf | None = None) -> StoreView:
        """One consistent view for several reads, at this instant; as of a time with
        `as_of`. Close it when done."""

    def position(self) -> dict[int, int]:
        """{partition: next offset already applied}."""

    def status(self) -> StoreStatus:
        """State, position, lag, key count, staleness and last error, as a StoreStatus."""

    def close(self) -> None:
        """Stop following, if the store follows, and close RocksDB."""


class FollowingStore(StoreReader, Protocol):
    """A StoreReader that restores and follows its topic."""

    @property
    def path(self) -> Path:
        """The store's own directory, where snapshots are written."""

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> object:
        """Restore up to the end offsets seen now, then follow behind (wait=False: return at once);
        BrokerUnavailable / StartTimeout after `timeout` seconds."""

    def wait_for(
        self, position: Mapping[int, int] | Mapping[str, int], timeout: float | None = None
    ) -> bool:
        """Block until every partition in `position` ({partition: offset}) is applied that far;
        False once `timeout` seconds (None: no limit) pass."""

    def checkpoint(self, dest: str | Path) -> None:
        """Write a consistent RocksDB checkpoint of the running store into `dest`, which must not
        exist; a new instance can start from it."""
