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

from globalstore import codec, snapshot
from globalstore.config import RocksDBOptions, StoreConfig
from globalstore.errors import (
    BrokerUnavailable,
    StartTimeout,
    StoreClosed,
    StoreNotReady,
)
from globalstore.follow import State, StoreThread
from globalstore.restore import RestoreListener
from globalstore.storage import Storage, inspect_meta

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
        config: StoreConfig | None = None,
        bootstrap_from: str | Path | None = None,
    ) -> None:
        self.config = config or StoreConfig(
            topic=topic,
            bootstrap_servers=bootstrap_servers,
            path=Path(path),
            kafka_config=dict(kafka_config or {}),
            allow_uncompacted=allow_uncompacted,
            rocksdb=rocksdb or RocksDBOptions(),
        )
        self._listener = restore_listener or RestoreListener()
        # A peer's snapshot (URL of GET /v1/snapshot, or a snapshot directory) to start from
        # when the store directory is empty; see snapshot.install.
        self._bootstrap_from = bootstrap_from
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
        if self._bootstrap_from is not None:
            snapshot.install(self._bootstrap_from, self.config.path)
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
        if thread.state is State.RUNNING:
            self._lookup = self._storage.reader()
            return self
        error = thread.error
        reached = thread.state
        health = thread.health
        self._shutdown()
        if error is not None:
            raise error
        where = self.config.bootstrap_servers
        if not health.ever_connected:
            raise BrokerUnavailable(
                f"no Kafka broker answered at {where} within {timeout}s "
                f"(last error: {health.last_error})"
            )
        raise StartTimeout(
            f"store for {self.config.topic!r} at {where} did not finish restoring within "
            f"{timeout}s (state {reached.value})"
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
        state = thread.state
        if state is State.RUNNING:
            return storage
        if state is State.FAILED:
            if thread.restored_at_ms is not None:
                return storage  # restored once: keep serving the last state; status() tells
            raise StoreClosed(f"store thread for {self.config.topic!r} failed") from thread.error
        raise StoreNotReady(f"store for {self.config.topic!r} is {state.value}")

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
        except Exception:
            self._raise_if_closed()
            raise

    def _raise_if_closed(self) -> None:
        # A query racing close() gets rocksdict's own error; say what happened instead.
        if self._closed:
            raise StoreClosed(f"store for {self.config.topic!r} was closed") from None

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
        except Exception:
            self._raise_if_closed()
            raise

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
        if thread is None:
            return {}
        high = dict(thread.health.high)
        return {p: max(0, h - positions.get(p, 0)) for p, h in sorted(high.items())}

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

    def checkpoint(self, dest: str | Path) -> None:
        """Write a consistent RocksDB checkpoint of the running store into `dest` (which must
        not exist): data and offsets of one instant, so a new instance can start from it
        (bootstrap_from). Table files are hard-linked when `dest` is on the same file system."""
        self._ready_storage().checkpoint(Path(dest))

    def _raise_unless_following(self) -> None:
        """For calls that wait on the store thread: it must be there and still applying."""
        thread = self._thread
        if self._closed or thread is None or thread.state is not State.RUNNING:
            raise StoreClosed(
                f"store for {self.config.topic!r} is not following (closed, not started, "
                "or its thread stopped: see __cause__)"
            ) from (None if thread is None else thread.error)

    def _notify_applied(self) -> None:
        with self._applied:
            self._applied.notify_all()

    def status(self) -> StoreStatus:
        """State, position, lag, key count, layout, last restore, staleness, last error."""
        thread = self._thread
        state = State.CLOSED if thread is None else thread.state
        storage = self._storage
        # Position, count and lag from one reading, so the report is of one instant.
        position, count = ({}, None) if storage is None else storage.snapshot_state()
        lag = self._lag_behind(position)
        health = None if thread is None else thread.health
        staleness = None
        if health is not None and health.in_sync_at is not None:
            staleness = (
                0.0
                if health.connected and not any(lag.values())
                else (time.monotonic() - health.in_sync_at)
            )
        restored = None if storage is None else _seconds(storage.restored_at_ms)
        return StoreStatus(
            topic=self.config.topic,
            path=str(self.config.path),
            state=state.value,
            ready=state is State.RUNNING,
            position=position,
            lag=lag,
            key_count=count,
            layout_version=codec.LAYOUT_VERSION
            if storage is None or storage.layout is None
            else storage.layout,
            last_restore_at=restored,
            connected=bool(health and health.connected),
            staleness_seconds=staleness,
            last_error=None if health is None else health.last_error,
        )


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
