"""The stores for asyncio (and anyio on its asyncio backend): AsyncGlobalStore and
AsyncSharedStore, built with the same arguments as GlobalStore and SharedStore.

What blocks is awaited: start(), wait_until_ready(), wait_for(), count(), checkpoint(),
changes() (its feed is read with `async for`) and close(). The waits take no thread: the
store's thread, when it publishes a batch or a new state, wakes the waiting coroutines
through their event loop (call_soon_threadsafe), and costs nothing while none waits.
Opening, closing and counting run in a worker thread.

Reads stay plain calls, as on the sync faces: get, get_many, get_entry, `key in store`,
items(limit=...), find(...), position(), status() take microseconds to a millisecond.
A long scan (items() or find() over many keys, to_arrow() read whole) holds the event
loop for as long as it runs: run it in a thread,
`await asyncio.to_thread(lambda: list(store.items(prefix="order-")))`,
`await asyncio.to_thread(lambda: store.to_arrow().read_all())`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack

from globalstore import codec
from globalstore.config import RocksDBOptions, StoreConfig, StoreSettings
from globalstore.errors import StoreFailed
from globalstore.listeners import StoreListener
from globalstore.read.changes import DEFAULT_BUFFER, ChangeFeed
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus
from globalstore.read.queries import StoreReads
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.shared_store import SharedStore
from globalstore.waiting import wait_until_async

__all__ = ["AsyncGlobalStore", "AsyncSharedStore"]

_Sync = TypeVar("_Sync", GlobalStore, SharedStore)


class _AsyncFace(StoreReads, Generic[_Sync]):
    """The reads of the sync face `sync`, and its waits as coroutines."""

    def __init__(self, sync: _Sync) -> None:
        self.sync: _Sync = sync  # the sync face: what reads answer from, for APIs that take one
        self.path = sync.path
        self.topic = sync.topic
        self._decode, self._value_format = sync._decode, sync._value_format

    def _copy(self) -> Copy:
        copy = self.sync._copy()
        self.topic = self.sync.topic  # a SharedStore learns it from its writer's copy
        return copy

    async def start(self, timeout: float = 60.0, *, wait: bool = True) -> Self:
        raise NotImplementedError

    def _started(self) -> bool:
        raise NotImplementedError

    async def wait_for(
        self, position: Mapping[int, int] | Mapping[str, int], timeout: float | None = None
    ) -> bool:
        """Wait until every partition in `position` ({partition: offset}, a partition as an
        int or a string of digits) is applied at least that far. False on timeout;
        ValueError for a partition the topic does not have."""
        return await wait_until_async(self.sync._position_wait(position), timeout)

    async def count(self) -> int:
        """The sync face's count(), in a thread (right after a bulk restore it waits for the
        count, or scans)."""
        return await asyncio.to_thread(self.sync.count)

    async def checkpoint(self, dest: str | Path) -> None:
        """The sync face's checkpoint(), in a thread."""
        await asyncio.to_thread(self.sync.checkpoint, dest)

    async def changes(
        self, prefix: str | None = None, keys: Iterable[str] | None = None, *,
        buffer: int = DEFAULT_BUFFER,
    ) -> ChangeFeed:  # fmt: skip
        """The sync face's changes() (opened in a thread: a store whose C loop follows
        waits for its consumer to take over); iterate the feed with `async for`."""
        return await asyncio.to_thread(self.sync.changes, prefix, keys, buffer=buffer)

    def position(self) -> dict[int, int]:
        """{partition: next offset} this face shows."""
        return self.sync.position()

    def status(self) -> StoreStatus:
        """The sync face's status()."""
        return self.sync.status()

    async def close(self) -> None:
        """Stop and close, in a thread. Idempotent."""
        await asyncio.to_thread(self.sync.close)
        self._closed = True

    async def __aenter__(self) -> Self:
        return self if self._started() else await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncGlobalStore(_AsyncFace[GlobalStore]):
    """GlobalStore for asyncio: `async with AsyncGlobalStore(topic, servers, path) as store:`
    restores without blocking the event loop, then follows the topic in its thread."""

    def __init__(
        self,
        topic: str | None = None,
        bootstrap_servers: str | None = None,
        path: str | Path | None = None,
        kafka_config: Mapping[str, Any] | None = None,
        *,
        config: StoreConfig | None = None,
        listeners: Sequence[StoreListener] = (),
        bootstrap_from: str | Path | None = None,
        **settings: Unpack[StoreSettings],
    ) -> None:
        """As GlobalStore's."""
        super().__init__(
            GlobalStore(
                topic,
                bootstrap_servers,
                path,
                kafka_config,
                config=config,
                listeners=listeners,
                bootstrap_from=bootstrap_from,
                **settings,
            )
        )

    async def start(self, timeout: float = 60.0, *, wait: bool = True) -> Self:
        """GlobalStore.start(): the same errors, the same release of all it took after a
        failed start. Cancelled, it closes the store."""
        store = self.sync
        try:
            thread = await asyncio.to_thread(store._begin, timeout)
        except asyncio.CancelledError:  # the thread opening the store carries on: stop it
            await asyncio.to_thread(store.close)
            raise
        if not wait:
            return self
        try:
            ready = await self.wait_until_ready(timeout)
        except BaseException:  # the thread's error, a cancel, close(): release it all
            await asyncio.to_thread(store._shutdown)
            raise
        if not ready:
            raise await asyncio.to_thread(store._gave_up, thread, timeout)
        return self

    def _started(self) -> bool:
        return self.sync._live is not None

    async def wait_until_ready(self, timeout: float | None = None) -> bool:
        """GlobalStore.wait_until_ready(), awaited."""
        thread = self.sync._live_thread()
        return await wait_until_async(self.sync._ready_wait(thread), timeout) and (
            self.sync._ready(thread)
        )

    def lag(self) -> dict[int, int]:
        """GlobalStore.lag()."""
        return self.sync.lag()


class AsyncSharedStore(_AsyncFace[SharedStore]):
    """SharedStore for asyncio: the query API over a store another process writes."""

    def __init__(
        self,
        path: str | Path,
        rocksdb: RocksDBOptions | None = None,
        *,
        value_format: int = codec.VALUE_FORMAT_VERSION,
        converters: Mapping[int, Callable[[Any], Any]] | None = None,
        max_staleness: float | None = None,
        bootstrap_servers: str | None = None,
        kafka_config: Mapping[str, Any] | None = None,
    ) -> None:
        """As SharedStore's."""
        super().__init__(
            SharedStore(
                path,
                rocksdb,
                value_format=value_format,
                converters=converters,
                max_staleness=max_staleness,
                bootstrap_servers=bootstrap_servers,
                kafka_config=kafka_config,
            )
        )

    @classmethod
    def with_writer(
        cls,
        topic: str,
        bootstrap_servers: str,
        path: str | Path,
        kafka_config: Mapping[str, Any] | None = None,
        **settings: Unpack[StoreSettings],
    ) -> AsyncSharedStore:
        """As SharedStore.with_writer(): a store whose start() starts a writer process of its
        own, and whose close() stops it."""
        face = cls.__new__(cls)
        sync = SharedStore.with_writer(topic, bootstrap_servers, path, kafka_config, **settings)
        _AsyncFace.__init__(face, sync)
        return face

    async def start(self, timeout: float = 60.0, *, wait: bool = True) -> Self:
        """SharedStore.start(), awaited."""
        store = self.sync
        await asyncio.to_thread(store._begin)
        if not wait:
            return self
        try:
            ready = await self.wait_until_ready(timeout)
        except StoreFailed:  # its own writer failed: start() may be called again
            await asyncio.to_thread(store._stop_following)
            raise
        if not ready:
            raise await asyncio.to_thread(store._gave_up, timeout)
        return self

    def _started(self) -> bool:
        return self.sync._thread is not None

    async def wait_until_ready(self, timeout: float | None = None) -> bool:
        """SharedStore.wait_until_ready(), awaited."""
        return await wait_until_async(self.sync._ready_wait(), timeout)

    def writer_alive(self) -> bool:
        """SharedStore.writer_alive()."""
        return self.sync.writer_alive()
