"""The source of a store whose follower runs in this process: a thread restores the topic into
the store's directory, then follows it; a healer rebuilds the copy beside it when the topic's
offsets move out of range (replicas/heal.py); reader processes are told of every batch
(replicas/announce.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from confluent_kafka import Consumer

from globalstore.config import OnOutOfRange, StoreConfig
from globalstore.errors import (
    GlobalStoreError,
    StoreAlreadyStarted,
    StoreClosed,
    StoreFailed,
    StoreNotReady,
)
from globalstore.follow.prepare import Prepare
from globalstore.follow.thread import StoreThread, ThreadStatus
from globalstore.kafka.clients import StoreConsumer
from globalstore.listeners import StoreListener
from globalstore.read.changes import ChangeFeed, Feeds
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus, behind, check_partitions, reaches
from globalstore.read.report import store_status
from globalstore.replicas import heal
from globalstore.replicas.announce import Announcer, WriterNote, new_writer_id
from globalstore.replicas.live import Live
from globalstore.replicas.opening import open_storage
from globalstore.status import State
from globalstore.storage import Storage
from globalstore.storage.failures import reported
from globalstore.waiting import Published, Wait

__all__ = ["InProcessSource"]

_T = TypeVar("_T")

# How long changes() waits, beyond an idle follower's wait, for the C loop to hand over.
_HAND_OVER_S = 5.0


class InProcessSource:
    """A follower thread in this process, the copy it fills, and the healer that replaces it."""

    def __init__(
        self,
        config: StoreConfig,
        listeners: Sequence[StoreListener] = (),
        bootstrap_from: str | Path | None = None,
        *,
        consumer_factory: Callable[[dict[str, Any]], StoreConsumer] = Consumer,
        prepare: Callable[[StoreConfig, Storage], Prepare] | None = None,
    ) -> None:
        """`bootstrap_from` is a peer's snapshot (URL of GET /v1/snapshot, or a snapshot
        directory) to start from when the store directory is empty (here) or must be rebuilt
        (the store thread). `consumer_factory` and `prepare(config, storage)` replace the
        threads' Kafka consumer and preparation (tests: no broker)."""
        self.config = config
        self._consumer_factory, self._prepare = consumer_factory, prepare
        self._bootstrap_from = bootstrap_from
        self._listeners = tuple(listeners)
        self._live: Live[heal.Replica] | None = None  # None until started
        self._healer: heal.Healer | None = None
        self._announcer: Announcer | None = None  # wakes reader processes (secondary.py)
        self._writer_id = new_writer_id()
        self._published = Published()  # notified after every batch applied and every swap
        self._feeds = Feeds(self._is_current)
        self._lifecycle = threading.Lock()
        self._closed = False
        self._closing = threading.Event()  # close() was called: stops a snapshot install

    @property
    def topic(self) -> str:
        """The topic the store follows."""
        return self.config.topic

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self.config.path

    # -- the copy that answers now -----------------------------------------------------------

    def copy(self) -> heal.Replica:
        """The live replica once restored (also after a later failure: it keeps serving its
        last state, status() tells)."""
        replica = self._replica()
        status = replica.thread.status
        if status.restored_at_ms is None:
            if status.state is State.FAILED:
                raise StoreFailed(f"store thread for {self.topic!r} failed") from status.error
            raise StoreNotReady(f"store for {self.topic!r} is {status.state.value}")
        return replica

    def serving(self) -> heal.Replica | None:
        """The live replica, None when not started."""
        live = self._live
        return None if live is None else live.current

    def scan(self, open_scan: Callable[[Copy], Iterator[_T]]) -> Iterator[_T]:
        """A scan of the live replica, which a heal does not close or reuse until it ends."""
        self.copy()  # StoreNotReady, StoreFailed, StoreClosed as a point read says them
        live = self._live
        if live is None:
            raise StoreClosed(f"store for {self.topic!r} is closed")
        return live.scan(open_scan)

    def _replica(self) -> heal.Replica:
        live = self._live
        if live is None:
            if self._closed:
                raise StoreClosed(f"store for {self.topic!r} is closed")
            raise StoreNotReady(f"store for {self.topic!r} has not been started")
        return live.current

    # -- start and stop ----------------------------------------------------------------------

    def begin(self, timeout: float) -> None:
        """Lock and open the directory, start the thread, the announcer and the healer."""
        with self._lifecycle:
            if self._closed:
                raise StoreClosed("store was closed; create a new GlobalStore")
            if self._live is not None:
                raise StoreAlreadyStarted("start() was already called")
            storage = open_storage(self.config, self._bootstrap_from, timeout, self._closing)
            try:
                self._launch(storage, timeout)
            except BaseException:  # release all it took: a new start() may follow at once
                taken = self._detach()
                if taken.live is None:
                    storage.close()
                self._release(taken)
                raise

    def _launch(self, storage: Storage, timeout: float) -> None:
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
            consumer_factory=self._consumer_factory,
            prepare=None if self._prepare is None else self._prepare(config, storage),
            feeds=self._feeds,
        )

    def ready_wait(self) -> Wait:
        """Reached once the thread has restored; raises the error that stopped it first."""
        thread = self._replica().thread

        def ready() -> bool:  # the thread notifies once `ready` is set
            return thread.ready.is_set() and self._restored(thread)

        return Wait(self._published, ready)

    def _restored(self, thread: StoreThread) -> bool:
        """True for `thread` ready and restored, else the error that stopped it."""
        status = thread.status
        if status.restored_at_ms is not None:
            return True
        if self._closed or status.error is None:
            raise StoreClosed(f"store for {self.topic!r} was closed while starting")
        raise status.error

    def abort(self) -> None:
        """Stop and close all begin() took."""
        with self._lifecycle:
            taken = self._detach()
        self._release(taken)

    def gave_up(self, timeout: float) -> GlobalStoreError:
        """Release all begin() took; the error that says what the thread was doing."""
        status = self._replica().thread.status
        self.abort()
        return status.not_ready(self.topic, self.config.bootstrap_servers, timeout)

    def started(self) -> bool:
        """Whether the thread was started and not stopped since."""
        return self._live is not None

    def close(self) -> None:
        """Stop following and close RocksDB. Idempotent."""
        self._closing.set()  # first: begin() holds the lifecycle lock while installing
        self._closed = True
        self.abort()
        self._feeds.end()

    def _detach(self) -> _Taken:
        """With the lifecycle lock held: take what begin() took out of self."""
        taken = _Taken(self._live, self._healer, self._announcer)
        self._live, self._healer, self._announcer = None, None, None
        return taken

    def _release(self, taken: _Taken) -> None:
        """Stop and close what begin() took, each part even if one before it failed."""
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

    # -- position, the topic's end, freshness ------------------------------------------------

    def position(self) -> dict[int, int]:
        """{partition: next offset already applied}."""
        live = self._live
        return {} if live is None else dict(live.current.storage.state.positions)

    def lag(self) -> dict[int, int]:
        """{partition: records between what is applied and the topic's last known end}."""
        live = self._live
        return {} if live is None else behind(live.current.thread.status.high, self.position())

    def position_wait(self, wanted: Mapping[int, int]) -> Wait:
        """Reached once every partition in `wanted` is applied that far."""

        def check() -> None:
            self._raise_if_stopped()
            known = self.position().keys() | self._replica().thread.status.high.keys()
            check_partitions(wanted, known, self.topic)

        return Wait(self._published, lambda: reaches(self.position(), wanted), check)

    def count_wait(self) -> Wait:
        """Reached once the thread has counted the keys (a bulk restore counts them after
        ready) and, with a ttl, built the time index; or once it has failed."""

        def counted() -> bool:
            state = self.copy().storage.state
            building = state.time_cursor is not None
            failed = self._replica().thread.status.state is State.FAILED
            return state.count is not None and (not building or failed)

        return Wait(self._published, counted, self._raise_if_stopped)

    def _raise_if_stopped(self) -> None:
        """For calls that wait on the store thread: it must be there and not stopped."""
        status = self._replica().thread.status
        if status.state is State.FAILED:
            raise StoreFailed(
                f"store for {self.topic!r} is no longer applying records"
            ) from status.error
        if status.state is State.CLOSED:
            raise StoreClosed(f"store for {self.topic!r} is no longer applying records (closed)")

    def checkpoint(self, dest: Path) -> None:
        """A consistent RocksDB checkpoint of the live replica into `dest`."""
        self.copy().storage.checkpoint(dest)

    def status(self) -> StoreStatus:
        """Of the live replica (closed when there is none) and the healer."""
        live, healer = self._live, self._healer
        replica = None if live is None else live.current
        t = ThreadStatus(state=State.CLOSED) if replica is None else replica.thread.status
        indexer = None if replica is None else replica.storage.indexes.indexer
        state = State.REBUILDING if healer is not None and healer.rebuilding else t.state
        return store_status(
            self.topic,
            self.path if replica is None else replica.storage.path,
            # position, count and layout from one state, so the report is of one instant
            None if replica is None else replica.storage.state,
            state=state,
            restored=t.state is State.RUNNING,
            high=t.high,
            connected=t.connected,
            staleness=t.staleness,
            max_staleness=self.config.max_staleness,
            failures=None if indexer is None else indexer.failures,
            purged=t.purged,
            last_error=t.last_error,
            rebuild_reason=t.rebuild_reason,
            skipped_records=t.skipped_records,
            migration=t.migration,
            migrated_values=t.migrated_values,
            conversion_failures=t.conversion_failures,
            transform_failures=t.transform_failures,
            self_heals=0 if healer is None else healer.heals,
            failure=_failure(state, t.error),
            progress=t.progress if healer is None or not healer.rebuilding else healer.progress,
            record_delays=t.delays,
        )

    # -- changes -----------------------------------------------------------------------------

    def open_feed(self, prefix: str | None, keys: Iterable[str] | None, buffer: int) -> ChangeFeed:
        """A feed the thread offers every batch it applies from now on."""
        # The C loop does not hand out each record: the thread's consumer follows from now on.
        copy = self.copy()
        handed = copy.thread.follow_in_python(self.config.poll_timeout + _HAND_OVER_S)
        feed = self._feeds.subscribe(self.topic, copy.decode, prefix, keys, buffer)
        if not handed:  # a batch the feed never saw may still land: say so at once
            feed.resync("the store's follower was busy when the feed opened")
        return feed

    def end_feeds(self) -> None:
        """End every feed, and any opened from now on (no lock taken)."""
        self._feeds.end()

    def _is_current(self, storage: object) -> bool:
        live = self._live
        return live is not None and live.current.storage is storage

    def _swapped(self) -> None:
        """A heal swapped in a copy rebuilt from the topic: feeds resync, waiters wake."""
        self._feeds.resync("the store was rebuilt from the topic")
        self._notify_applied()

    def _notify_applied(self) -> None:
        """After each applied batch and each swap: wake those waiting here and the reader
        processes. On the follower's hot path: neither hands the GIL over while nobody waits
        (docs/store.md, "Performance notes")."""
        self._published.notify_waiters()
        announcer = self._announcer
        if announcer is not None:
            announcer.wake()

    def _writer_note(self) -> WriterNote | None:
        live = self._live
        return None if live is None else live.current.note(self._writer_id, self.config.path)


def _failure(state: State, error: BaseException | None) -> str | None:
    """The type of the error that stopped the store, while it is reported failed."""
    return type(error).__name__ if state is State.FAILED and error is not None else None


class _Taken(NamedTuple):
    """What a started store holds, apart from its settings."""

    live: Live[heal.Replica] | None
    healer: heal.Healer | None
    announcer: Announcer | None
