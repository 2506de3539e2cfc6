"""The source of a store read in a process that does not write it, beside the one that does (a
GlobalStore, `globalstore serve`, `globalstore follow`, or a writer process of its own): one
copy on disk for every worker process of a service.

It opens the writer's live copy as a RocksDB secondary instance, and catches up each time
the writer has applied a batch (announce.py): the query that first sees the writer's batch
counter move catches up before it reads, and a thread woken by the writer's note does it when
no query comes. Either way a few milliseconds behind the writer, also under heavy reads.
When the writer swaps in a rebuilt copy (a self-heal) or restarts, the reader opens the copy
the writer now calls live, once that is ready, and answers from it from then on; until then
it answers from the copy it has. When the writer stops or dies, the reader keeps answering
from its last state, and status() says it is stale and since when.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from globalstore.config import (
    IndexFn,
    RocksDBOptions,
    StoreConfig,
    ValueCache,
    check_seconds,
    function_indexes,
)
from globalstore.converters import ValueFormats
from globalstore.errors import (
    GlobalStoreError,
    StartTimeout,
    StorageError,
    StoreAlreadyStarted,
    StoreClosed,
    StoreNotReady,
)
from globalstore.follow.delays import RecordDelays
from globalstore.read.changes import ChangeFeed
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus, behind, check_partitions, reaches
from globalstore.read.report import store_status
from globalstore.replicas.announce import HEARTBEAT_S, BatchCounter, WakeSocket, WriterNote
from globalstore.replicas.live import Live
from globalstore.status import State
from globalstore.stores.topic_changes import ReaderFeeds
from globalstore.stores.writer_copy import WriterCopy
from globalstore.stores.writer_process import WriterProcess, writer_spec
from globalstore.waiting import Published, Wait

__all__ = ["WRITER_SILENT_S", "SecondarySource", "with_writer_process"]

log = logging.getLogger(__name__)

WRITER_SILENT_S = 3 * HEARTBEAT_S  # no note for this long: the writer is gone
_WRITER_FAILED = "WriterFailed"  # status().failure once the writer said it failed
_RECEIVE_S = 0.25  # longest wait for a note, so close() is noticed soon
_QUERY_GRACE_S = 0.001  # after a note, the time left to queries to catch up themselves

_T = TypeVar("_T")


class SecondarySource:
    """Another process's writer, its live copy read as a RocksDB secondary instance, kept
    current as the writer applies batches; optionally that writer itself, a process this
    source starts, restarts and stops (writer_process.py)."""

    def __init__(
        self,
        path: Path,
        rocksdb: RocksDBOptions | None,
        formats: ValueFormats,
        max_staleness: float | None,
        feeds: ReaderFeeds,
        writer: WriterProcess | None = None,
        value_cache: ValueCache | None = None,
        index_fns: Mapping[str, IndexFn] | None = None,
    ) -> None:
        """`max_staleness` of what this reader shows; `feeds` read the topic for changes();
        `writer` is a writer process of this store's own; `value_cache` for get() of each
        copy it reads; `index_fns` the store's function indexes (Copy)."""
        check_seconds("max_staleness", max_staleness)
        self.path = path
        self.formats = formats
        self._max_staleness = max_staleness
        self.topic = ""  # the writer's, once its copy is open
        self._rocksdb = rocksdb
        self._value_cache = value_cache
        self._index_fns = index_fns
        self._closed = False
        self._live: Live[WriterCopy] | None = None
        self._note: WriterNote | None = None
        self._heard_at = 0.0  # monotonic time of the last note
        self._in_sync_at: float | None = None
        self._last_error: str | None = None
        self._published = Published()  # notified after each catch-up, a copy opened, close()
        self._stopped = threading.Event()
        self._wake: WakeSocket | None = None
        self._thread: threading.Thread | None = None
        self._copies = 0
        self._batches: BatchCounter | None = None  # the writer's, once a copy is open
        self._caught_up_to = -1  # its value before the last catch-up
        self._catching_up = threading.Lock()
        self._feeds = feeds
        self._writer = writer
        self._visible = RecordDelays()  # the writer's batches, once this reader shows them
        self._counted: tuple[str, str, int] | None = None  # (writer, copy, newest batch)

    # -- lifecycle ---------------------------------------------------------------------------

    def begin(self, timeout: float) -> None:
        """Register, follow the writer in a thread, and start the writer if it is this
        store's own."""
        if self._closed:
            raise StoreClosed(f"shared store at {self.path} was closed; create a new one")
        if self._thread is not None:
            raise StoreAlreadyStarted("start() was already called")
        self._stopped.clear()
        self._wake = WakeSocket(self.path, uuid.uuid4().hex[:12])
        self._thread = threading.Thread(
            target=self._follow, name=f"globalstore-reader-{self.path.name}", daemon=True
        )
        self._thread.start()
        if self._writer is not None:
            self._writer.start(self._published.notify_waiters)

    def gave_up(self, timeout: float) -> StartTimeout:
        """After a start() that found no ready writer within `timeout`: stop following (so
        start() may be called again); the error to raise."""
        self.abort()
        if self._writer is not None:
            return StartTimeout(
                f"the writer process has not made the store at {self.path} ready within "
                f"{timeout}s (it goes on; its log is the logger globalstore.writer)"
            )
        return StartTimeout(
            f"no writer made the store at {self.path} ready within {timeout}s: run a "
            "GlobalStore, `globalstore serve` or `globalstore follow` on it"
        )

    def ready_wait(self) -> Wait:
        """Reached once the writer's copy is open here."""
        return Wait(self._published, lambda: self._live is not None, self._check_open)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"shared store at {self.path} is closed")
        if self._writer is not None:
            self._writer.check()

    def started(self) -> bool:
        """Whether begin() ran and no abort() or close() since."""
        return self._thread is not None

    def close(self) -> None:
        """Stop catching up and close the copy. Idempotent."""
        self._closed = True
        self.abort()
        self._feeds.end()
        live, self._live = self._live, None
        if live is not None:
            live.close()
        batches, self._batches = self._batches, None
        if batches is not None:
            batches.close()
        self._published.notify_waiters()
        if self._writer is not None:
            self._writer.stop()

    def abort(self) -> None:
        """Stop following the writer (start() may be called again)."""
        self._stopped.set()
        self._feeds.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.close()

    # -- following the writer ----------------------------------------------------------------

    def _follow(self) -> None:
        wake = self._wake
        assert wake is not None  # made before the thread starts
        while not self._stopped.is_set():
            note = self._next_note(wake)
            if note is None or self._stopped.is_set():
                continue
            self._note, self._heard_at = note, time.monotonic()
            try:
                self._catch_up(note)
                self._count_visible(note)
                self._last_error = None
            except GlobalStoreError as exc:
                self._last_error = str(exc)
                log.warning("shared store at %s: %s", self.path, str(exc))
            except Exception as exc:  # this thread must go on: the next note may fix it
                self._last_error = f"{type(exc).__name__}: {exc}"
                log.exception("shared store at %s: catching up failed", self.path)
            self._published.notify_waiters()

    def _next_note(self, wake: WakeSocket) -> WriterNote | None:
        try:
            return wake.receive(_RECEIVE_S)
        except Exception as exc:  # this thread must go on following, whatever the socket did
            self._last_error = f"receiving the writer's note failed: {type(exc).__name__}"
            log.exception("shared store at %s: receiving the writer's note failed", self.path)
            self._stopped.wait(_RECEIVE_S)  # not a busy loop if the socket keeps failing
            return None

    def _catch_up(self, note: WriterNote) -> None:
        live = self._live
        current = None if live is None else live.current
        if current is not None and (current.writer, current.live) == (note.writer, note.live):
            # Queries catch up themselves. This thread does it only for a process that does
            # not query (wait_for callers wait on it): were it to hold the catch-up while
            # waiting for the GIL among busy readers, their queries would read the old view.
            time.sleep(_QUERY_GRACE_S)
            self._catch_up_copy(wait=True)
        elif note.ready:
            self._open(note)  # the first copy, a heal's new one, or a restarted writer's
        else:
            return  # a writer restoring: answer from what we have until it is ready
        self._track_sync(note)

    def _catch_up_copy(self, wait: bool) -> None:
        """Bring the open copy up to what the writer has applied, unless another thread is at
        it (wait=False: a query then reads the view it has). Only while the writer's note
        names this copy: a copy the writer has left is not caught up again."""
        if not self._catching_up.acquire(blocking=wait):
            return
        try:
            live, note, batches = self._live, self._note, self._batches
            if live is None or note is None or batches is None:
                return
            copy, before = live.current, batches.value
            if (copy.writer, copy.live) != (note.writer, note.live):
                return
            if before == self._caught_up_to:
                return  # a query caught up meanwhile
            copy.storage.catch_up()
            self._caught_up_to = before
        finally:
            self._catching_up.release()
        self._published.notify_waiters()

    def _fresh(self) -> None:
        """On every query: catch up first if the writer has applied a batch since."""
        batches = self._batches
        if batches is not None and batches.value != self._caught_up_to:
            try:
                self._catch_up_copy(wait=False)
            except GlobalStoreError as exc:  # answer from the view we have; status tells
                self._last_error = str(exc)

    def _open(self, note: WriterNote) -> None:
        wake = self._wake
        assert wake is not None  # the thread that calls this stops before it goes
        self._copies += 1
        work = wake.directory / f"copy-{self._copies}"
        copy = WriterCopy.open(
            self.path, note, self._rocksdb, self.formats, work, self._value_cache, self._index_fns
        )
        self.topic = copy.topic or self.topic
        if self._live is None:
            self._batches = BatchCounter(self.path, create=False)  # the writer made it
            self._live = Live(copy)
        else:
            self._live.swap(copy)  # the old copy retires (live.py)
        log.info("shared store at %s: reading the copy in %s", self.path, copy.storage.path)

    def _count_visible(self, note: WriterNote) -> None:
        """Count the delay of each batch the note lists that this reader has not counted, if
        it shows them now (a query may have caught up before the note came, a few
        milliseconds late at most). Not counted: the batches listed in the first note of a
        copy (applied before this reader opened the copy, as a restore's records are not
        counted for the writer), and batches that left the note's list before this reader
        read a note (a reader more than RECENT_BATCHES batches behind)."""
        live = self._live
        if live is None or (live.current.writer, live.current.live) != (note.writer, note.live):
            return  # no copy yet, or the note names one this reader has not opened
        if not reaches(live.current.storage.state.positions, note.positions):
            return
        newest = max((batch.number for batch in note.applied), default=0)
        counted, self._counted = self._counted, (note.writer, note.live, newest)
        # A copy's first note; or numbers that went back: another follower thread (a heal).
        if counted is None or counted[:2] != self._counted[:2] or newest < counted[2]:
            return
        now = time.time()
        for batch in note.applied:
            if batch.number > counted[2]:  # else counted already (a heartbeat repeats them)
                self._visible.observe(now - batch.oldest_ms / 1000, batch.records)

    def _track_sync(self, note: WriterNote) -> None:
        positions = self.position()
        if reaches(positions, note.high):
            self._in_sync_at = time.monotonic()

    # -- the copy that answers now -----------------------------------------------------------

    def copy(self) -> WriterCopy:
        """The writer's live copy, caught up first if the writer has applied a batch since."""
        self._fresh()
        live = self._live
        if live is None:
            if self._closed:
                raise StoreClosed(f"shared store at {self.path} is closed")
            raise StoreNotReady(f"shared store at {self.path} has no ready copy from a writer")
        return live.current

    def serving(self) -> WriterCopy | None:
        """The copy this reader reads, None before one is open."""
        live = self._live
        return None if live is None else live.current

    def scan(self, open_scan: Callable[[Copy], Iterator[_T]]) -> Iterator[_T]:
        """A scan of the copy this reader reads, which a move to another copy does not
        close until the scan ends."""
        self.copy()  # caught up; StoreNotReady or StoreClosed as a point read says them
        live = self._live
        if live is None:
            raise StoreClosed(f"shared store at {self.path} is closed")
        return live.scan(open_scan)

    def count_wait(self) -> None:
        """None: the writer counts the keys; a reader counts over a scan until it has."""
        return None

    def position(self) -> dict[int, int]:
        """{partition: next offset already applied}, in the copy this reader shows."""
        live = self._live
        return {} if live is None else dict(live.current.storage.state.positions)

    def lag(self) -> dict[int, int]:
        """{partition: records between what this reader shows and the topic's end as the
        writer last knew it}."""
        note = self._note
        return {} if note is None else behind(note.high, self.position())

    def position_wait(self, wanted: Mapping[int, int]) -> Wait:
        """Reached once this reader shows every partition in `wanted` at least that far."""

        def check() -> None:
            self._check_open()
            note = self._note
            known = self.position().keys() | ({} if note is None else note.high).keys()
            check_partitions(wanted, known, self.topic)

        return Wait(self._published, lambda: reaches(self.position(), wanted), check)

    def open_feed(self, prefix: str | None, keys: Iterable[str] | None, buffer: int) -> ChangeFeed:
        """Each change once this reader shows it; read from the topic (topic_changes.py), so
        it needs the writer's bootstrap_servers (and kafka_config). ConfigurationError
        without them, or for a store with a transform (the topic's values are not the stored
        ones: take the writer's feed). A move to another copy of the store (a writer's
        restart or rebuild) is a Resync."""
        copy = self.copy()
        with self._catching_up:
            self._feeds.read_topic(copy.storage, self.topic, self._reading)
        return self._feeds.subscribe(self.topic, copy.decode, prefix, keys, buffer)

    def end_feeds(self) -> None:
        """End every feed, and any opened from now on (no lock taken)."""
        self._feeds.end()

    def _reading(self) -> tuple[object, Mapping[int, int]]:
        """The copy this reader reads and its positions (the feed's reading of the topic)."""
        live = self._live
        if live is None:
            return None, {}
        copy = live.current
        return copy, dict(copy.storage.state.positions)

    def checkpoint(self, dest: Path) -> None:
        """Refused: a secondary instance cannot write a complete checkpoint."""
        raise StorageError(
            f"a shared reader of {self.path} cannot take a checkpoint: take it from the "
            "writer (GlobalStore.checkpoint, or GET /v1/snapshot of the process that writes)"
        )

    def writer_alive(self) -> bool:
        """True while the writer speaks: a note within the last few heartbeats, and it has
        not said it stopped."""
        note = self._note
        return (
            note is not None
            and time.monotonic() - self._heard_at < WRITER_SILENT_S
            and note.state not in (State.CLOSED, State.FAILED)
        )

    def status(self) -> StoreStatus:
        """The writer's state while it speaks, else "offline" (stale: staleness grows);
        `behind_writer` is what the writer applied that this reader does not show yet."""
        note, alive, live, wake = self._note, self.writer_alive(), self._live, self._wake
        held = None if live is None else live.current.storage.state
        since = self._in_sync_at

        def staleness(lag: Mapping[int, int]) -> float | None:
            if alive and held is not None and not any(lag.values()):
                return 0.0
            return None if since is None else time.monotonic() - since

        position = {} if held is None else held.positions
        return store_status(
            self.topic,
            self.path if live is None else live.current.storage.path,
            held,
            state=State(note.state) if alive and note is not None else State.OFFLINE,
            restored=alive and held is not None and note is not None and note.ready,
            high={} if note is None else note.high,
            connected=alive,
            staleness=staleness,
            max_staleness=self._max_staleness,
            last_error=self._last_error or self._silence(),
            # A writer that stopped on an error: /healthz of a reader (serve --workers) fails.
            failure=_WRITER_FAILED if note is not None and note.state == State.FAILED else None,
            behind_writer=None if note is None else behind(note.positions, position),
            refused_notes=0 if wake is None else wake.refused,
            visible_delays=self._visible.snapshot(),
        )

    def _silence(self) -> str | None:
        note = self._note
        if note is None or self.writer_alive():
            return None
        if note.state in (State.CLOSED, State.FAILED):
            return f"the writer ({note.writer}) stopped ({note.state}); answers are its last state"
        silent = time.monotonic() - self._heard_at
        return f"the writer ({note.writer}) has not been heard from for {silent:.0f} s"


def with_writer_process(config: StoreConfig) -> SecondarySource:
    """A reader of the store at config.path with a writer process of its own, which follows
    as GlobalStore(config=config) would. ConfigurationError for a function that process
    cannot import by name."""
    spec = writer_spec(config.topic, config.bootstrap_servers, config.path,
                       config.kafka_config, config.named_settings())  # fmt: skip
    feeds = ReaderFeeds(config.path, config.bootstrap_servers, config.kafka_config)
    writer = WriterProcess(spec)
    return SecondarySource(config.path, config.rocksdb, config.value_formats(),
                           config.max_staleness, feeds, writer, config.value_cache,
                           function_indexes(config.indexes))  # fmt: skip
