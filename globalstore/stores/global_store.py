"""GlobalStore: the facade that wires storage, the restore/follow thread and queries."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Unpack

from globalstore.config import OnOutOfRange, StoreConfig, StoreSettings
from globalstore.converters import decoder
from globalstore.errors import (
    GlobalStoreError,
    StoreAlreadyStarted,
    StoreClosed,
    StoreFailed,
    StoreNotReady,
)
from globalstore.follow.thread import StoreThread
from globalstore.listeners import StoreListener
from globalstore.read.changes import DEFAULT_BUFFER, ChangeFeed, Feeds
from globalstore.read.protocols import (
    StoreStatus,
    behind,
    check_partitions,
    partition_offsets,
    reaches,
)
from globalstore.read.queries import StoreQueries
from globalstore.replicas import heal
from globalstore.replicas.announce import Announcer, WriterNote, new_writer_id
from globalstore.replicas.live import Live
from globalstore.replicas.opening import open_storage
from globalstore.status import State
from globalstore.storage import Storage
from globalstore.storage.failures import reported
from globalstore.waiting import Changes, Wait, wait_until

__all__ = ["GlobalStore"]

log = logging.getLogger(__name__)

# How long changes() waits, beyond an idle follower's wait, for the C loop to hand over.
_HAND_OVER_S = 5.0


class GlobalStore(StoreQueries):
    """A complete local RocksDB copy of one compacted topic, kept current in the background.

    >>> with GlobalStore(topic="orders.current", bootstrap_servers="127.0.0.1:9092",
    ...                  path="state/orders.current") as store:   # doctest: +SKIP
    ...     store["order-17"]
    """

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
        """Settings are StoreConfig's fields, passed by name (None means its default), or a
        whole `config`, which named settings then override. `bootstrap_from` is a peer's
        snapshot (URL of GET /v1/snapshot, or a snapshot directory) to start from when the
        store directory is empty (here) or must be rebuilt (the store thread)."""
        given: dict[str, Any] = {
            "topic": topic,
            "bootstrap_servers": bootstrap_servers,
            "path": path,
            "kafka_config": kafka_config,
            **settings,
        }
        named = {name: value for name, value in given.items() if value is not None}
        if config is None:
            config = StoreConfig(**named)  # TypeError names a missing or unknown setting
        elif named:
            config = dataclasses.replace(config, **named)
        self.config = config
        self._bootstrap_from = bootstrap_from
        self.topic = config.topic
        self.path = config.path
        self._listeners = tuple(listeners)
        self._live: Live[heal.Replica] | None = None  # None until started
        self._healer: heal.Healer | None = None
        self._announcer: Announcer | None = None  # wakes reader processes (shared_store.py)
        self._writer_id = new_writer_id()
        self._applied = Changes()  # notified after every batch applied
        self._feeds = Feeds(self._is_live)
        self._lifecycle = threading.Lock()
        self._closed = False
        self._closing = threading.Event()  # close() was called: stops a snapshot install
        formats = config.value_formats()
        self._decode, self._value_format = decoder(formats), formats.current

    @classmethod
    def from_config(
        cls,
        config: StoreConfig,
        *,
        listeners: Sequence[StoreListener] = (),
        bootstrap_from: str | Path | None = None,
    ) -> GlobalStore:
        """A store with every setting of `config`: GlobalStore(config=config, ...)."""
        return cls(config=config, listeners=listeners, bootstrap_from=bootstrap_from)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> GlobalStore:
        """Restore up to the end offsets seen now, then return; following continues behind.

        Raises BrokerUnavailable / StartTimeout after `timeout` seconds, or the fatal error
        that stopped the restore (TopicNotCompacted, ...). After a failed start the directory
        is released and start() may be called again.

        wait=False returns at once: queries raise StoreNotReady until the restore is
        complete; wait_until_ready() or a listener's on_state_change tell when. Without a
        timeout to honour, the thread keeps retrying an unreachable broker (status() shows
        the last error) until close().
        """
        thread = self._begin(timeout)
        if not wait:
            return self
        try:
            if self.wait_until_ready(timeout):
                return self
        except BaseException:  # the thread's error, Ctrl-C, close(): release thread and lock
            self._shutdown()
            raise
        raise self._gave_up(thread, timeout)

    def _begin(self, timeout: float) -> StoreThread:
        """start() up to the wait: lock, open, start the thread (see start())."""
        with self._lifecycle:
            if self._closed:
                raise StoreClosed("store was closed; create a new GlobalStore")
            if self._live is not None:
                raise StoreAlreadyStarted("start() was already called")
            storage = open_storage(self.config, self._bootstrap_from, timeout, self._closing)
            try:
                return self._launch(storage, timeout)
            except BaseException:  # release all it took: a new start() may follow at once
                taken = self._detach()
                if taken.live is None:
                    storage.close()
                self._release(taken)
                raise

    def _gave_up(self, thread: StoreThread, timeout: float) -> GlobalStoreError:
        """After a start() that was not ready within `timeout`: release all it took; the
        error to raise."""
        status = thread.status
        self._shutdown()
        return status.not_ready(self.topic, self.config.bootstrap_servers, timeout)

    def _launch(self, storage: Storage, timeout: float) -> StoreThread:
        """Start the thread filling `storage` (locked and open), the announcer and the healer,
        each one kept in self as soon as it exists, so that _release() finds it."""
        path = self.config.path
        heal.adopt_rebuilt(storage)
        # Short broker requests while planning, so a failed start() returns near its timeout.
        rpc_timeout = min(5.0, max(0.5, timeout / 2))
        thread = self._make_thread(self.config, storage, rpc_timeout, self._bootstrap_from)
        self._live = Live(heal.Replica(storage, thread))
        with reported(f"announcing the store at {path} to reader processes", path):
            self._announcer = Announcer(path, self._writer_note)
        thread.start()
        if self.config.out_of_range is OnOutOfRange.REBUILD:
            self._healer = heal.Healer(self.config, self._live, self._make_thread, self._swapped)
            self._healer.start()
        return thread

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """True once the restore is complete (also after a later failure: the store keeps
        serving its last state), False on timeout. Raises the error that stopped the thread
        before it was ready, or StoreClosed if the store was closed meanwhile."""
        thread = self._live_thread()
        return wait_until(self._ready_wait(thread), timeout) and self._ready(thread)

    def _ready_wait(self, thread: StoreThread) -> Wait:
        return Wait(self._applied, thread.ready.is_set)  # the thread notifies once it is set

    def _ready(self, thread: StoreThread) -> bool:
        """True for `thread` ready and restored, else the error that stopped it."""
        status = thread.status
        if status.restored_at_ms is not None:
            return True
        if self._closed or status.error is None:
            raise StoreClosed(f"store for {self.topic!r} was closed while starting")
        raise status.error

    def close(self) -> None:
        """Stop following and close RocksDB. Idempotent; safe from any thread, also while
        start() waits (which then raises StoreClosed), or installs a snapshot."""
        self._closing.set()  # first: start() holds the lifecycle lock while installing
        self._closed = True
        self._shutdown()
        self._feeds.end()

    def _shutdown(self) -> None:
        with self._lifecycle:
            taken = self._detach()
        self._release(taken)

    def _detach(self) -> _Taken:
        """With the lifecycle lock held: take what start() took out of self."""
        taken = _Taken(self._live, self._healer, self._announcer)
        self._live, self._healer, self._announcer = None, None, None
        return taken

    def _release(self, taken: _Taken) -> None:
        """Stop and close what start() took, each part even if one before it failed."""
        live = taken.live
        with contextlib.ExitStack() as stack:  # its callbacks run last in, first out
            if taken.announcer is not None and live is not None:
                stack.callback(self._farewell, taken.announcer, live.current)
            if live is not None:
                stack.callback(live.close)
            if taken.healer is not None:  # first: it may be about to swap
                stack.callback(taken.healer.join)
                stack.callback(taken.healer.stop)

    def _farewell(self, announcer: Announcer, replica: heal.Replica) -> None:
        announcer.close(
            dataclasses.replace(replica.note(self._writer_id, self.config.path), state=State.CLOSED)
        )

    def __enter__(self) -> GlobalStore:
        # Both `with GlobalStore(...) as s:` and `with GlobalStore(...).start(t) as s:` work.
        return self if self._live is not None else self.start()

    # -- queries (the methods are StoreQueries'; this says when they may read) ---------------

    def _make_thread(
        self,
        config: StoreConfig,
        storage: Storage,
        rpc_timeout: float = 5.0,
        bootstrap_from: str | Path | None = None,
    ) -> StoreThread:
        """A thread to fill `storage`: the store's own, or (heal.py) a rebuild's."""
        return StoreThread(
            config,
            storage,
            self._listeners,
            self._notify_applied,
            rpc_timeout=rpc_timeout,
            bootstrap_from=bootstrap_from,
            changes=self._feeds,
        )

    def _replica(self) -> heal.Replica:
        live = self._live
        if live is None:
            if self._closed:
                raise StoreClosed(f"store for {self.topic!r} is closed")
            raise StoreNotReady(f"store for {self.topic!r} has not been started")
        return live.current

    def _live_thread(self) -> StoreThread:
        return self._replica().thread

    def _copy(self) -> heal.Replica:
        """The live replica once restored (also after a later failure: it keeps serving its
        last state, status() tells)."""
        replica = self._replica()
        status = replica.thread.status
        if status.restored_at_ms is None:
            if status.state is State.FAILED:
                raise StoreFailed(f"store thread for {self.topic!r} failed") from status.error
            raise StoreNotReady(f"store for {self.topic!r} is {status.state.value}")
        return replica

    def count(self) -> int:
        """Number of live keys, kept as a counter. Right after a bulk (cold) restore the store
        is ready before its keys are counted (about a second per million keys, done in the
        background); a call meanwhile waits for the exact number."""
        with self._applied:
            while True:
                storage = self._ready_storage()
                count = storage.state.count
                # With a ttl, the expired keys are counted over the time index: waits for
                # its build too, which follows a bulk restore as the count does (a store
                # that failed meanwhile builds no more: its keys are counted over a scan).
                building = storage.state.time_cursor is not None
                if count is not None and (
                    not building or self._live_thread().status.state is State.FAILED
                ):
                    return self._unexpired_count(storage, count)
                self._raise_if_stopped()
                self._applied.wait(0.1)

    # -- progress ----------------------------------------------------------------------------

    def position(self) -> dict[int, int]:
        """{partition: next offset already applied}."""
        live = self._live
        return {} if live is None else dict(live.current.storage.state.positions)

    def lag(self) -> dict[int, int]:
        """{partition: records between what is applied and the topic's last known end}."""
        live = self._live
        return {} if live is None else behind(live.current.thread.status.high, self.position())

    def wait_for(
        self, position: Mapping[int, int] | Mapping[str, int], timeout: float | None = None
    ) -> bool:
        """Block until every partition in `position` ({partition: offset}; a partition as an
        int or a string of digits, as /v1/status names it) is applied at least that far
        (also while the store is still restoring). Returns False on timeout; ValueError for a
        partition the topic does not have."""
        return wait_until(self._position_wait(position), timeout)

    def _position_wait(self, position: Mapping[int, int] | Mapping[str, int]) -> Wait:
        wanted = partition_offsets(position)

        def check() -> None:
            self._raise_if_stopped()
            known = self.position().keys() | self._live_thread().status.high.keys()
            check_partitions(wanted, known, self.topic)

        return Wait(self._applied, lambda: reaches(self.position(), wanted), check)

    def checkpoint(self, dest: str | Path) -> None:
        """Write a consistent RocksDB checkpoint of the running store into `dest` (which must
        not exist): data and offsets of one instant, so a new instance can start from it
        (bootstrap_from). Table files are hard-linked when `dest` is on the same file system."""
        self._ready_storage().checkpoint(Path(dest))

    def changes(
        self, prefix: str | None = None, keys: Iterable[str] | None = None, *,
        buffer: int = DEFAULT_BUFFER,
    ) -> ChangeFeed:  # fmt: skip
        """A feed of the changes the store applies from now on to the keys under `prefix`
        and/or among `keys` (all when neither), each once it is visible to queries, in
        offset order per partition: Change(key, value or None for a delete, partition,
        offset). Past `buffer` records not taken, one Resync item replaces them: re-read
        then. Close it (or use `with`). StoreNotReady until the store is ready."""
        # The C loop does not hand out each record: the thread's consumer follows from now on.
        handed = self._copy().thread.follow_in_python(self.config.poll_timeout + _HAND_OVER_S)
        feed = self._feeds.subscribe(self.topic, self._decode, prefix, keys, buffer)
        if not handed:  # a batch the feed never saw may still land: say so at once
            feed.resync("the store's follower was busy when the feed opened")
        return feed

    def _is_live(self, storage: object) -> bool:
        live = self._live
        return live is not None and live.current.storage is storage

    def _swapped(self) -> None:
        """A heal swapped in a copy rebuilt from the topic: feeds resync, waiters wake."""
        self._feeds.resync("the store was rebuilt from the topic")
        self._notify_applied()

    def _raise_if_stopped(self) -> None:
        """For calls that wait on the store thread: it must be there and not stopped."""
        status = self._live_thread().status
        if status.state is State.FAILED:
            raise StoreFailed(
                f"store for {self.topic!r} is no longer applying records"
            ) from status.error
        if status.state is State.CLOSED:
            raise StoreClosed(f"store for {self.topic!r} is no longer applying records (closed)")

    def _notify_applied(self) -> None:
        """After each applied batch and each swap: wake those waiting here and the reader
        processes. On the follower's hot path: neither hands the GIL over while nobody waits
        (docs/store.md, "Performance notes")."""
        self._applied.notify_waiters()
        announcer = self._announcer
        if announcer is not None:
            announcer.wake()

    def _writer_note(self) -> WriterNote | None:
        live = self._live
        return None if live is None else live.current.note(self._writer_id, self.config.path)

    def status(self) -> StoreStatus:
        """State, position, lag, key count, layout, last restore, staleness and freshness
        (against max_staleness), last error, and the error type that stopped the store (state
        failed)."""
        live = self._live
        replica = None if live is None else live.current
        return heal.report(self.config, self.path, replica, self._healer)


class _Taken(NamedTuple):
    """What a started store holds, apart from its settings."""

    live: Live[heal.Replica] | None
    healer: heal.Healer | None
    announcer: Announcer | None
