"""A store's change feed, as its consumer holds it: `store.changes()` returns a ChangeFeed.

The writer of the store (the store thread, or a reader process's topic consumer) offers each
batch's records once the batch is visible to queries; the feed keeps those its filter wants
in a bounded buffer, and its consumer takes them, as Change items, with `for`, `async for` or
get(timeout). Offering never blocks the writer: an append to a deque (atomic under the GIL)
and, only while the consumer sleeps, a wake that cannot block either (the release of a lock
the consumer waits on, or the asyncio loop's call_soon_threadsafe).

The buffer is bounded in records and in bytes (a topic's values may be as large as its
max.message.bytes). A consumer that falls behind either bound is never left with a silent
gap: the buffer is emptied and ONE Resync item takes its place; nothing is kept until the
consumer has taken it, and it must then re-read what it cares about (every change from then
on follows).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from globalstore import codec
from globalstore.errors import InvalidValue
from globalstore.storage.records import Record, written

__all__ = [
    "DEFAULT_BUFFER",
    "DEFAULT_BUFFER_BYTES",
    "Change",
    "ChangeFeed",
    "Feeds",
    "Resync",
    "key_filter",
    "record_bytes",
]

log = logging.getLogger(__name__)

DEFAULT_BUFFER = 50_000  # records a feed holds for its consumer before it resyncs
DEFAULT_BUFFER_BYTES = 16 << 20  # and bytes of them (record_bytes)
_RECORD_OVERHEAD = 100  # bytes a held record costs beside its key and value (tuple, ints)


def record_bytes(record: Record) -> int:
    """What holding `record` costs, about: its key, its value and the tuple around them."""
    key, value = record[0], record[1]
    return (
        _RECORD_OVERHEAD + (0 if key is None else len(key)) + (0 if value is None else len(value))
    )


@dataclass(frozen=True, slots=True)
class Change:
    """A key's new value (decoded as get() returns it), None when the record deleted it, and
    the record that made the change."""

    key: str
    value: Any
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Resync:
    """Changes were lost to this consumer (why: `reason`): re-read what you care about; the
    changes that follow this item are complete again."""

    reason: str


class ChangeFeed:
    """The changes of one store a consumer asked for, in offset order per partition.

    Iterate it (`for`, or `async for` on an asyncio loop), or call get(timeout), from one
    consumer at a time (open a feed per consumer). Iteration ends once the feed or its store
    is closed. Use it as a context manager (or call close())
    so that the store stops keeping changes for it."""

    def __init__(
        self,
        topic: str,
        decode: codec.Decode,
        wanted: Callable[[bytes], bool] | None,
        buffer: int,
        unsubscribe: Callable[[ChangeFeed], None],
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        """`wanted(key)` says which keys the feed keeps (None: all); `buffer` records and
        `buffer_bytes` bytes bound what it holds; `unsubscribe` is called once by close()."""
        if buffer < 1:
            raise ValueError(f"a change feed's buffer holds at least one record, not {buffer}")
        self.topic, self._decode, self._wanted = topic, decode, wanted
        self._capacity, self._capacity_bytes = buffer, buffer_bytes
        # Bytes held = offered - taken; each counter is written by one side only.
        self._offered_bytes = 0  # the writer's
        self._taken_bytes = 0  # the consumer's
        self._unsubscribe: Callable[[ChangeFeed], None] | None = unsubscribe
        self._buffer: deque[Record | Resync] = deque()
        self._gap = False  # a Resync is in the buffer: nothing else is kept until it is taken
        self._ended = False  # the store closed: the buffer is the last of it
        self._closed = False
        self._sleeping = False  # the consumer waits for a wake
        self._token = threading.Lock()  # held while no wake is due; released to wake
        self._token.acquire()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    # -- the writer's side (never blocks) ----------------------------------------------------

    def offer(self, records: Sequence[Record]) -> None:
        """Keep the records of one applied batch that the feed wants, or resync past the
        bound."""
        if self._gap or self._ended:
            return
        wanted = self._wanted
        kept = records if wanted is None else [r for r in records if _wants(wanted, r[0])]
        if not kept:
            return
        held = len(self._buffer)
        if held and held + len(kept) > self._capacity:  # one batch always fits an empty one
            self.resync(f"more than {self._capacity} changes waited for this consumer")
            return
        size = sum(map(record_bytes, kept))
        if held and self.held_bytes() + size > self._capacity_bytes:
            self.resync(
                f"more than {self._capacity_bytes} bytes of changes waited for this consumer"
            )
            return
        self._offered_bytes += size
        self._buffer.extend(kept)
        self._wake()

    def held_bytes(self) -> int:
        """About how many bytes of records the buffer holds (record_bytes)."""
        return max(0, self._offered_bytes - self._taken_bytes)

    def resync(self, reason: str) -> None:
        """Drop what the buffer holds and give the consumer one Resync instead."""
        if self._gap or self._ended:
            return
        self._gap = True
        self._buffer.clear()
        self._offered_bytes = self._taken_bytes  # nothing held (a take under way: about)
        self._buffer.append(Resync(reason))
        self._wake()

    def end(self) -> None:
        """The store closed: the consumer takes what is left, then iteration ends."""
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        if not self._sleeping:
            return
        self._sleeping = False
        waiter = self._waiter
        if waiter is not None:
            loop, future = waiter
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody to wake
                loop.call_soon_threadsafe(_resolve, future)
            return
        with contextlib.suppress(RuntimeError):  # a wake is due already
            self._token.release()

    # -- the consumer's side -----------------------------------------------------------------

    def get(self, timeout: float | None = None) -> Change | Resync | None:
        """The next item; None if none came within `timeout` seconds (None: no limit).
        StopIteration once the feed or its store is closed and nothing is left."""
        while True:
            item = self._take()
            if item is not None:
                return item
            self._sleeping = True
            if self._buffer or self._ended or self._closed:  # offered meanwhile
                self._sleeping = False
                continue
            woken = self._token.acquire(timeout=-1 if timeout is None else timeout)
            self._sleeping = False
            if not woken:
                return None

    def __iter__(self) -> ChangeFeed:
        return self

    def __next__(self) -> Change | Resync:
        item = self.get()
        assert item is not None  # get() without a timeout returns an item or stops
        return item

    def __aiter__(self) -> ChangeFeed:
        return self

    async def __anext__(self) -> Change | Resync:
        while True:
            try:
                item = self._take()
            except StopIteration:
                raise StopAsyncIteration from None
            if item is not None:
                return item
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            self._waiter = (loop, future)
            self._sleeping = True
            try:
                if not (self._buffer or self._ended or self._closed):
                    await future
            finally:
                self._sleeping = False
                self._waiter = None

    def _take(self) -> Change | Resync | None:
        """The next item without waiting, None if there is none yet."""
        while True:
            if self._closed:
                raise StopIteration
            try:
                item = self._buffer.popleft()
            except IndexError:
                if self._ended:
                    raise StopIteration from None
                return None
            if isinstance(item, Resync):
                self._gap = False  # what the writer applies from now on is kept again
                return item
            self._taken_bytes += record_bytes(item)
            change = self._change(item)
            if change is not None:
                return change

    def _change(self, record: Record) -> Change | None:
        """The record as a Change, as a query would read it; None for one the store does not
        write (a key that is not UTF-8), or whose value does not decode (logged, as a scan
        leaves it out)."""
        kept = written(record)
        if kept is None:
            return None
        key, raw = kept
        partition, offset = record[3], record[4]
        if raw is None:
            return Change(key.decode(), None, partition, offset)
        try:
            value = self._decode(raw, key, self.topic)
        except InvalidValue as exc:
            log.warning("the change feed of %s left out a value: %s", self.topic, str(exc))
            return None
        return Change(key.decode(), value, partition, offset)

    def close(self) -> None:
        """Stop the feed: the store keeps nothing more for it; iteration ends. Idempotent."""
        self._closed = True
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe(self)
        self._sleeping = True  # wake the consumer whatever it was doing
        self._wake()

    def __enter__(self) -> ChangeFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> ChangeFeed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Feeds:
    """The open feeds of one store, and what its writer offers them. `active` is False while
    none is open: all a writer pays then is that one look per batch. `current(source)` says
    whether what `source` applies is what queries read (a rebuild beside the copy that
    answers is not, until it is swapped in)."""

    def __init__(self, current: Callable[[object], bool] = lambda _source: True) -> None:
        self.active = False
        self._current = current
        self._feeds: tuple[ChangeFeed, ...] = ()  # replaced whole: offered without a lock
        self._lock = threading.Lock()
        self._ended = False

    def subscribe(
        self,
        topic: str,
        decode: codec.Decode,
        prefix: str | None = None,
        keys: Iterable[str] | None = None,
        buffer: int = DEFAULT_BUFFER,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> ChangeFeed:
        """A new feed of the changes applied from now on."""
        wanted = key_filter(prefix, keys)
        feed = ChangeFeed(topic, decode, wanted, buffer, self._unsubscribe, buffer_bytes)
        with self._lock:
            if not self._ended:
                self._feeds = (*self._feeds, feed)
                self.active = True
        if self._ended:  # also when end() ran while this one joined (end() takes no lock)
            feed.end()
        return feed

    def _unsubscribe(self, feed: ChangeFeed) -> None:
        with self._lock:
            self._feeds = tuple(f for f in self._feeds if f is not feed)
            self.active = bool(self._feeds)

    def publish(self, source: object, records: Sequence[Record]) -> None:
        """Offer the records of a batch `source` has made visible to queries."""
        if records and self._current(source):
            for feed in self._feeds:
                feed.offer(records)

    def resync(self, reason: str) -> None:
        """Every feed's consumer must re-read (the store moved to another copy)."""
        for feed in self._feeds:
            feed.resync(reason)

    def end(self) -> None:
        """The store closed, or its application shuts down: every feed, and any subscribed
        from now on, ends once its consumer has taken what it holds. Takes no lock, so a
        signal handler may call it (it may have interrupted a thread holding one)."""
        self._ended = True  # first: a subscribe() that missed the swap below sees it
        feeds, self._feeds, self.active = self._feeds, (), False
        for feed in feeds:
            feed.end()


def key_filter(prefix: str | None, keys: Iterable[str] | None) -> Callable[[bytes], bool] | None:
    """The test a feed asked for `prefix` and/or `keys` applies to a key; None for every key."""
    start = None if prefix is None else prefix.encode()
    named = None if keys is None else frozenset(key.encode() for key in keys)
    if start is None and named is None:
        return None
    if named is None:
        assert start is not None
        return lambda key: key.startswith(start)
    if start is None:
        return named.__contains__
    return lambda key: key in named and key.startswith(start)


def _wants(wanted: Callable[[bytes], bool], key: bytes | None) -> bool:
    return key is not None and wanted(key)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
