"""The stores for asyncio (and anyio on its asyncio backend): AsyncStore, written once over a
store's source (read/source.py), and AsyncGlobalStore, AsyncSharedStore, AsyncReadOnlyStore
and AsyncSwitchingStore, built with the same arguments as their sync faces.

What blocks is awaited: start(), wait_until_ready(), wait_for(), count(), checkpoint() and
close(); changes() is read with `async for change in store.changes(...)` (it opens on the
first step; `async with store.changes() as feed` closes it at the end). The waits take no
thread: the store's thread, when it publishes a batch or a new state, wakes the waiting coroutines
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
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack

from globalstore import codec
from globalstore.config import (
    IndexFn,
    RocksDBOptions,
    StoreConfig,
    StoreSettings,
    check_setting_names,
)
from globalstore.listeners import StoreListener
from globalstore.read.changes import DEFAULT_BUFFER, Change, ChangeFeed, Resync
from globalstore.read.protocols import StoreStatus, partition_offsets
from globalstore.read.source import StoreSource
from globalstore.read.view import Viewable
from globalstore.stores.global_store import Follower, GlobalStore
from globalstore.stores.read_only_store import ReadOnlyStore
from globalstore.stores.shared_store import SharedStore
from globalstore.stores.store import Store
from globalstore.stores.switching_store import SwitchingStore
from globalstore.waiting import wait_until_async

__all__ = [
    "AsyncGlobalStore",
    "AsyncReadOnlyStore",
    "AsyncSharedStore",
    "AsyncStore",
    "AsyncSwitchingStore",
    "FeedOpening",
]

_Sync = TypeVar("_Sync", bound=Store)


class AsyncStore(Viewable[StoreSource], Generic[_Sync]):
    """The reads of a store over its source, and its start, waits and close as coroutines."""

    def __init__(self, sync: _Sync) -> None:
        """`sync` is the sync face over the same source (`store.sync`: for APIs that take
        one, such as the HTTP API)."""
        super().__init__(sync.source)
        self.sync: _Sync = sync

    async def start(self, timeout: float = 60.0, *, wait: bool = True) -> Self:
        """Store.start(): the same errors, the same release of all it took after a failed
        start. Cancelled, it closes the store."""
        source = self._source
        try:
            await asyncio.to_thread(source.begin, timeout)
        except asyncio.CancelledError:  # the thread starting the store carries on: stop it
            await asyncio.to_thread(self.sync.close)
            raise
        if not wait:
            return self
        try:
            ready = await self.wait_until_ready(timeout)
        except BaseException:  # the error that stopped it, a cancel, close(): release it all
            await asyncio.to_thread(source.abort)
            raise
        if not ready:
            raise await asyncio.to_thread(source.gave_up, timeout)
        return self

    async def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Store.wait_until_ready(), awaited."""
        return await wait_until_async(self._source.ready_wait(), timeout)

    async def wait_for(
        self, position: Mapping[int, int] | Mapping[str, int], timeout: float | None = None
    ) -> bool:
        """Wait until every partition in `position` ({partition: offset}, a partition as an
        int or a string of digits) is applied at least that far. False on timeout;
        ValueError for a partition the topic does not have."""
        wanted = partition_offsets(position)
        return await wait_until_async(self._source.position_wait(wanted), timeout)

    async def count(self) -> int:
        """Store.count(): awaits a count this process's follower is making, or counts over a
        scan in a thread."""
        wait = self._source.count_wait()
        if wait is not None:
            await wait_until_async(wait, None)
        return await asyncio.to_thread(self._stored_count)

    async def checkpoint(self, dest: str | Path) -> None:
        """Store.checkpoint(), in a thread."""
        await asyncio.to_thread(self.sync.checkpoint, dest)

    def changes(
        self, prefix: str | None = None, keys: Iterable[str] | None = None, *,
        buffer: int = DEFAULT_BUFFER,
    ) -> FeedOpening:  # fmt: skip
        """Store.changes(), opened in a thread at the first step (a store whose C loop
        follows waits for its consumer to take over): `async for change in
        store.changes(...)`, or `async with store.changes(...) as feed`."""
        return FeedOpening(lambda: self.sync.changes(prefix, keys, buffer=buffer))

    def end_changes(self) -> None:
        """Store.end_changes(): every change feed ends, now and from now on."""
        self._source.end_feeds()

    def position(self) -> dict[int, int]:
        """{partition: next offset} this store shows."""
        return self._source.position()

    def lag(self) -> dict[int, int]:
        """Store.lag()."""
        return self._source.lag()

    def status(self) -> StoreStatus:
        """Store.status()."""
        return self._source.status()

    async def close(self) -> None:
        """Stop and close, in a thread. Idempotent."""
        self._closed = True
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> Self:
        return self if self._source.started() else await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class FeedOpening:
    """A change feed opened in a thread when first needed: iterate it with `async for`, enter
    it with `async with` (which closes it), or await it for the ChangeFeed itself."""

    def __init__(self, open_feed: Callable[[], ChangeFeed]) -> None:
        self._open = open_feed
        self._feed: ChangeFeed | None = None

    async def opened(self) -> ChangeFeed:
        """The feed, opened at the first call."""
        if self._feed is None:
            self._feed = await asyncio.to_thread(self._open)
        return self._feed

    def __await__(self) -> Generator[Any, None, ChangeFeed]:
        return self.opened().__await__()

    def __aiter__(self) -> FeedOpening:
        return self

    async def __anext__(self) -> Change | Resync:
        return await (await self.opened()).__anext__()

    async def __aenter__(self) -> ChangeFeed:
        return await self.opened()

    async def __aexit__(self, *exc: object) -> None:
        if self._feed is not None:
            self._feed.close()


class AsyncGlobalStore(AsyncStore[GlobalStore]):
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
        follower: Follower = "thread",
        **settings: Unpack[StoreSettings],
    ) -> None:
        """As GlobalStore's."""
        check_setting_names(type(self).__name__, settings)
        super().__init__(
            GlobalStore(
                topic,
                bootstrap_servers,
                path,
                kafka_config,
                config=config,
                listeners=listeners,
                bootstrap_from=bootstrap_from,
                follower=follower,
                **settings,
            )
        )


class AsyncSharedStore(AsyncStore[SharedStore]):
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
        sync: SharedStore | None = None,
        indexes: Mapping[str, IndexFn | str] | None = None,
    ) -> None:
        """As SharedStore's; `sync`, a SharedStore made already, is used as it is."""
        super().__init__(
            sync
            or SharedStore(
                path,
                rocksdb,
                value_format=value_format,
                converters=converters,
                max_staleness=max_staleness,
                bootstrap_servers=bootstrap_servers,
                kafka_config=kafka_config,
                indexes=indexes,
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
        check_setting_names(f"{cls.__name__}.with_writer", settings)
        sync = SharedStore.with_writer(topic, bootstrap_servers, path, kafka_config, **settings)
        return cls(path, sync=sync)

    def writer_alive(self) -> bool:
        """SharedStore.writer_alive()."""
        return self.sync.writer_alive()


class AsyncReadOnlyStore(AsyncStore[ReadOnlyStore]):
    """ReadOnlyStore for asyncio: a store directory as last written, opened at once."""

    def __init__(
        self,
        path: str | Path,
        rocksdb: RocksDBOptions | None = None,
        *,
        value_format: int = codec.VALUE_FORMAT_VERSION,
        converters: Mapping[int, Callable[[Any], Any]] | None = None,
        indexes: Mapping[str, IndexFn | str] | None = None,
    ) -> None:
        """As ReadOnlyStore's."""
        super().__init__(
            ReadOnlyStore(
                path, rocksdb, value_format=value_format, converters=converters, indexes=indexes
            )
        )


class AsyncSwitchingStore(AsyncStore[SwitchingStore]):
    """SwitchingStore for asyncio: answers from one store, switches to another."""

    def __init__(self, active: GlobalStore) -> None:
        """As SwitchingStore's."""
        super().__init__(SwitchingStore(active))

    @property
    def active(self) -> Store:
        """The store that answers queries now."""
        return self.sync.active

    async def switch_to(
        self,
        new: GlobalStore,
        timeout: float | None = None,
        *,
        remove_old: bool = False,
        started: bool = False,
    ) -> bool:
        """SwitchingStore.switch_to(), in a thread."""
        return await asyncio.to_thread(
            self.sync.switch_to, new, timeout, remove_old=remove_old, started=started
        )
