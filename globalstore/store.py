"""GlobalStore: the facade that wires storage, the restore/follow thread and queries."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from globalstore import codec
from globalstore.config import RocksDBOptions, StoreConfig
from globalstore.errors import (
    BrokerUnavailable,
    GlobalStoreError,
    StartTimeout,
    StorageError,
    StoreClosed,
    StoreNotReady,
)
from globalstore.listeners import RestoreListener
from globalstore.storage import Storage, inspect_meta
from globalstore.thread import State, StoreThread, ThreadStatus

log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class StoreStatus:
    """A point-in-time report, cheap enough to poll for health checks."""

    topic: str
    path: str
    state: str
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


class GlobalStore:
    """A complete local RocksDB copy of one compacted topic, kept current in the background.

    >>> with GlobalStore(topic="orders.current", bootstrap_servers="127.0.0.1:9092",
    ...                  path="state/orders.current") as store:   # doctest: +SKIP
    ...     store.get("order-17")
    """

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        path: str | Path,
        kafka_config: Mapping[str, Any] | None = None,
        *,
        allow_uncompacted: bool = False,
        restore_listener: RestoreListener | None = None,
        rocksdb: RocksDBOptions | None = None,
    ) -> None:
        config = StoreConfig(
            topic=topic,
            bootstrap_servers=bootstrap_servers,
            path=Path(path),
            kafka_config=dict(kafka_config or {}),
            allow_uncompacted=allow_uncompacted,
            rocksdb=rocksdb or RocksDBOptions(),
        )
        self._init(config, restore_listener)

    @classmethod
    def from_config(
        cls, config: StoreConfig, restore_listener: RestoreListener | None = None
    ) -> GlobalStore:
        """A store with every setting of `config` (the constructor covers the common ones)."""
        store = cls.__new__(cls)
        store._init(config, restore_listener)
        return store

    def _init(self, config: StoreConfig, restore_listener: RestoreListener | None) -> None:
        self.config = config
        self._listener = restore_listener or RestoreListener()
        self._storage: Storage | None = None
        self._thread: StoreThread | None = None
        self._applied = threading.Condition()
        self._closed = False
        # The point-lookup function: raises until ready, then RocksDB's get itself (hot path).
        self._lookup: Callable[[bytes], bytes | None] = self._lookup_unavailable

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> GlobalStore:
        """Restore up to the end offsets seen now, then return; following continues behind.

        Raises BrokerUnavailable / StartTimeout after `timeout` seconds, or the fatal error
        that stopped the restore (TopicNotCompacted, ...). After a failed start the directory
        is released and start() may be called again.
        """
        if self._closed:
            raise StoreClosed("store was closed; create a new GlobalStore")
        if self._thread is not None:
            raise RuntimeError("start() was already called")
        self._storage = Storage(self.config.path, self.config.rocksdb)
        # Short broker requests while planning, so a failed start() returns near its timeout.
        rpc_timeout = min(5.0, max(0.5, timeout / 2))
        thread = StoreThread(
            self.config, self._storage, self._listener, self._notify_applied, rpc_timeout
        )
        self._thread = thread
        thread.start()
        try:
            thread.ready.wait(timeout)
        except BaseException:  # Ctrl-C while restoring: release the thread and the lock
            self._shutdown()
            raise
        status = thread.status
        if status.state is State.RUNNING:
            self._lookup = self._storage.reader()
            return self
        self._shutdown()
        if status.error is not None:
            raise status.error
        where = self.config.bootstrap_servers
        if not status.ever_connected:
            raise BrokerUnavailable(
                f"no Kafka broker answered at {where} within {timeout}s "
                f"(last error: {status.last_error})"
            )
        raise StartTimeout(
            f"store for {self.config.topic!r} at {where} did not finish restoring within "
            f"{timeout}s (state {status.state.value})"
        )

    def close(self) -> None:
        """Stop following and close RocksDB. Idempotent."""
        self._closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        self._lookup = self._lookup_unavailable
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.stop()
            thread.join()
        storage, self._storage = self._storage, None
        if storage is not None:
            storage.close()

    def __enter__(self) -> GlobalStore:
        # Both `with GlobalStore(...) as s:` and `with GlobalStore(...).start(t) as s:` work.
        return self if self._thread is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def inspect(path: str | Path, rocksdb: RocksDBOptions | None = None) -> StoreStatus:
        """The status of the store at `path` from its own files alone: no Kafka connection,
        and no lock either (RocksDB's read-only mode), so it also works while another process
        runs the store. Position, key count, layout and last restore are as last written; lag
        and staleness are unknown (empty / None); state is "offline". StorageError if there is
        no store at `path`."""
        meta = inspect_meta(path, rocksdb)
        return StoreStatus(
            topic=meta.topic or "",
            path=str(path),
            state="offline",
            ready=False,
            position=dict(sorted(meta.offsets.items())),
            lag={},
            key_count=meta.count,
            layout_version=codec.LAYOUT_VERSION if meta.layout is None else meta.layout,
            last_restore_at=_seconds(meta.restored_at_ms),
            connected=False,
            staleness_seconds=None,
            last_error=None,
        )

    # -- queries -----------------------------------------------------------------------------

    def _ready_storage(self) -> Storage:
        thread, storage = self._thread, self._storage
        if thread is None or storage is None:
            if self._closed:
                raise StoreClosed(f"store for {self.config.topic!r} is closed")
            raise StoreNotReady(f"store for {self.config.topic!r} has not been started")
        status = thread.status
        if status.state is State.RUNNING:
            return storage
        if status.state is State.FAILED:
            if status.restored_at_ms is not None:
                return storage  # restored once: keep serving the last state; status() tells
            raise StoreClosed(f"store thread for {self.config.topic!r} failed") from status.error
        raise StoreNotReady(f"store for {self.config.topic!r} is {status.state.value}")

    def _lookup_unavailable(self, key: bytes) -> bytes | None:
        return self._ready_storage().get(key)  # raises StoreNotReady / StoreClosed

    def get(self, key: str) -> Any:
        """The decoded JSON value of `key`, or None if absent. InvalidValue if undecodable."""
        k = key.encode()
        raw = self._fetch(k)
        return None if raw is None else codec.decode(raw, k, self.config.topic)

    def get_entry(self, key: str) -> codec.Entry | None:
        """Value plus record timestamp, partition and offset, or None if absent."""
        k = key.encode()
        raw = self._fetch(k)
        return None if raw is None else codec.decode_entry(raw, k, self.config.topic)

    def _fetch(self, key: bytes) -> bytes | None:
        try:
            return self._lookup(key)
        except Exception as exc:
            error = self._query_error(exc)
            if error is exc:
                raise
            raise error from exc

    def _query_error(self, exc: Exception) -> Exception:
        """What a failed read means to the caller: rocksdict raises bare Exceptions, both
        for a read racing close() and for RocksDB's own read errors (a damaged block, I/O)."""
        if self._closed:
            return StoreClosed(f"store for {self.config.topic!r} was closed")
        if isinstance(exc, GlobalStoreError):
            return exc
        return StorageError(f"RocksDB read failed in {self.config.path}: {exc}")

    def items(
        self,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """(key, value) in key byte order over one point-in-time view; start inclusive, end
        exclusive. Exhaust or close the iterator before close()."""
        scan = self._scan(prefix, start, end, reverse, limit)  # the view is fixed here
        return self._guarded(codec.decode_items(scan, self.config.topic))

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

    def _scan(
        self,
        prefix: str | None,
        start: str | None,
        end: str | None,
        reverse: bool,
        limit: int | None,
    ) -> Iterator[tuple[bytes, bytes]]:
        lower, upper = _bounds(prefix, start, end)
        scan = self._ready_storage().scan(lower, upper, reverse)
        return scan if limit is None else itertools.islice(scan, max(0, limit))

    def _guarded(self, it: Iterator[_T]) -> Iterator[_T]:
        try:
            yield from it
        except Exception as exc:
            error = self._query_error(exc)
            if error is exc:
                raise
            raise error from exc

    def count(self) -> int:
        """Number of live keys, kept as a counter. Right after a bulk (cold) restore the store
        is ready before its keys are counted (about a second per million keys, done in the
        background); a call meanwhile waits for the exact number."""
        with self._applied:
            while True:
                storage = self._ready_storage()
                count = storage.snapshot_state()[1]
                if count is not None:
                    return count
                self._raise_unless_following()
                self._applied.wait(0.1)

    # -- progress ----------------------------------------------------------------------------

    def position(self) -> dict[int, int]:
        """{partition: next offset already applied}."""
        storage = self._storage
        return {} if storage is None else storage.snapshot_state()[0]

    def lag(self) -> dict[int, int]:
        """{partition: records between what is applied and the topic's last known end}."""
        return self._lag_behind(self.position())

    def _lag_behind(self, positions: Mapping[int, int]) -> dict[int, int]:
        thread = self._thread
        return {} if thread is None else _lag(thread.status, positions)

    def wait_for(self, position: Mapping[int, int], timeout: float | None = None) -> bool:
        """Block until every partition in `position` is applied at least that far.
        Returns False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._applied:
            while True:
                current = self.position()
                if all(current.get(p, 0) >= o for p, o in position.items()):
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._raise_unless_following()
                self._applied.wait(0.1 if remaining is None else min(remaining, 0.1))

    def _raise_unless_following(self) -> None:
        """For calls that wait on the store thread: it must be there and still applying."""
        thread = self._thread
        if self._closed or thread is None or thread.status.state is not State.RUNNING:
            raise StoreClosed(
                f"store for {self.config.topic!r} is not following (closed, not started, "
                "or its thread stopped: see __cause__)"
            ) from (None if thread is None else thread.status.error)

    def _notify_applied(self) -> None:
        with self._applied:
            self._applied.notify_all()

    def status(self) -> StoreStatus:
        """State, position, lag, key count, layout, last restore, staleness, last error."""
        thread, storage = self._thread, self._storage
        t = ThreadStatus(state=State.CLOSED) if thread is None else thread.status
        # Position, count and lag from one reading, so the report is of one instant.
        position, count = ({}, None) if storage is None else storage.snapshot_state()
        lag = _lag(t, position)
        staleness = None
        if t.in_sync_at is not None:
            in_sync = t.connected and not any(lag.values())
            staleness = 0.0 if in_sync else time.monotonic() - t.in_sync_at
        return StoreStatus(
            topic=self.config.topic,
            path=str(self.config.path),
            state=t.state.value,
            ready=t.state is State.RUNNING,
            position=position,
            lag=lag,
            key_count=count,
            layout_version=codec.LAYOUT_VERSION
            if storage is None or storage.layout is None
            else storage.layout,
            last_restore_at=None if storage is None else _seconds(storage.restored_at_ms),
            connected=t.connected,
            staleness_seconds=staleness,
            last_error=t.last_error,
            rebuild_reason=t.rebuild_reason,
            skipped_records=t.skipped_records,
        )


def _lag(status: ThreadStatus, positions: Mapping[int, int]) -> dict[int, int]:
    """Records between the applied positions and the topic's last known end, per partition."""
    return {p: max(0, h - positions.get(p, 0)) for p, h in sorted(status.high.items())}


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _bounds(
    prefix: str | None, start: str | None, end: str | None
) -> tuple[bytes | None, bytes | None]:
    """Byte bounds [lower, upper) from a prefix and/or a start/end key range."""
    lower = None if start is None else start.encode("utf-8")
    upper = None if end is None else end.encode("utf-8")
    if prefix:
        p = prefix.encode("utf-8")
        lower = p if lower is None else max(lower, p)
        succ = _successor(p)
        if succ is not None:
            upper = succ if upper is None else min(upper, succ)
    return lower, upper


def _successor(prefix: bytes) -> bytes | None:
    """Smallest byte string greater than every string starting with prefix (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
