"""Where the store thread's batches come from: a BatchSource consumes one batch and applies it
to the storage. Two implement it, and the thread's loop runs the same way over either:

    ConsumerSource   the thread's own consumer (Python): restores, then follows
    NativeSource     the C loop (native.py) with a consumer of its own: restores, then
                     follows a store that runs no Python function per record (no transform
                     or index function: a declared one runs in C; no ttl or change
                     listener); for any other store the thread's consumer takes over

The C loop is about twice as fast, holds the GIL for less of each record (it makes no
Message objects), and writes exactly what the Python loop writes (docs/store.md,
"Performance notes"). The consumer source is where confluent-kafka's
messages become plain records (storage/ never sees a message): `split` keeps the events
(errors, partition ends) apart and turns each partition end into an offset reached. A
store's transform (transform.py) runs in either: on the consumer's records as storage reads
them, on the C loop's values as it writes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from globalstore.codec import UNREADABLE_HEADERS
from globalstore.config import StoreConfig
from globalstore.follow import native
from globalstore.follow.native import NativeRestorer
from globalstore.follow.plan import Plan
from globalstore.kafka.clients import StoreConsumer
from globalstore.shaping import transform
from globalstore.shaping.fields import Shape
from globalstore.storage import Applied, Record, Records, Storage

__all__ = [
    "NO_SINK",
    "BatchSource",
    "ChangeSink",
    "ConsumerSource",
    "FollowBatch",
    "MessageRecords",
    "NativeSource",
    "Seen",
    "SourceBatch",
    "follows_in_c",
    "native_source",
    "split",
]

log = logging.getLogger(__name__)

_RESTORE_WAIT = 0.05  # seconds a restoring source waits for its first record


@dataclass
class SourceBatch:
    """What one batch of a source did: what the storage applied, the consumer's events that
    came with it (errors, partition ends: storage sees records only), and the records the
    store's transform raised on (their keys kept as they were)."""

    applied: Applied
    events: list[Any] = field(default_factory=list)
    transform_failures: int = 0
    # Following: the oldest record timestamp (ms) of the batch (None: none, or restoring).
    oldest_ms: int | None = None


class BatchSource(Protocol):
    """Where the store thread's batches come from: the consumer or the C loop."""

    # Following with work to do between batches (chores, a purge): never wait for records.
    busy: bool

    def apply(self, storage: Storage, now_ms: int) -> SourceBatch:
        """Consume one batch (events included) and apply it with its offsets."""
        ...

    def close(self) -> None:
        """Release what the source holds; the thread's consumer is the thread's to close."""


class ChangeSink(Protocol):
    """Where the records of each applied batch go while `active` (read/changes.py Feeds: a
    store's change feeds). Not active, it costs the follower one look a batch."""

    active: bool

    def publish(self, source: object, records: Sequence[Record]) -> None:
        """The records `source` (a storage) has just made visible to queries."""
        ...


class _NoSink:
    active = False

    def publish(self, source: object, records: Sequence[Record]) -> None:
        pass


NO_SINK: ChangeSink = _NoSink()


class ConsumerSource:
    """The thread's consumer. Restoring: big batches. Following: ONE consumer call a batch
    (each call hands the GIL over, and getting it back behind busy threads costs a switch
    interval or more): while records flow, take what is queued without waiting; once none
    is, wait for the next record and return it at once, so produce-to-visible latency stays
    a few ms. The batch grows while the follower is behind (FollowBatch)."""

    def __init__(
        self,
        consumer: StoreConsumer,
        config: StoreConfig,
        exact_count: bool,
        list_keys: bool,
        sink: ChangeSink = NO_SINK,
    ) -> None:
        self.consumer, self.config, self.sink = consumer, config, sink
        self.exact_count = exact_count  # look up each key to keep the live-key count exact
        self.list_keys = list_keys  # list the keys each batch changed (a listener wants them)
        self.restoring = True
        self.busy = False  # following with work to do between batches: do not wait
        self.flowing = False  # the last batch held something: more may be queued
        self.size = FollowBatch(config)
        self.transformer = transform.transformer(config)

    def assign(self, offsets: Mapping[int, int]) -> None:
        """Read the topic's partitions from `offsets` ({partition: offset})."""
        self.consumer.assign([TopicPartition(self.config.topic, p, o) for p, o in offsets.items()])

    def take_over(
        self, source: BatchSource, starts: Mapping[int, int], positions: Mapping[int, int]
    ) -> ConsumerSource:
        """Close `source` (the C loop) and follow on from the stored `positions` (from
        `starts` where none is stored yet)."""
        source.close()
        self.assign({p: max(positions.get(p, start), start) for p, start in starts.items()})
        return self

    def add_partitions(self, partitions: Iterable[int]) -> None:
        """Follow partitions added to the topic, from their beginning."""
        name = self.config.topic
        self.consumer.incremental_assign(
            [TopicPartition(name, p, OFFSET_BEGINNING) for p in partitions]
        )

    def apply(self, storage: Storage, now_ms: int) -> SourceBatch:
        """Consume one batch (events included), transform it if the store does, and apply it with
        its offsets; the change feeds get it once it is visible."""
        consumed, ends, events = split(self._batch())
        # Following: the batch's oldest record timestamp, read from the messages (the records
        # below may be a transform's, which runs on each as it is read: read them once).
        oldest = None if self.restoring or not consumed else consumed.oldest_timestamp()
        transformed = None if self.transformer is None else self.transformer.records(consumed)
        records: Records = consumed if transformed is None else transformed
        seen = Seen(records) if self.sink.active else None
        read = records if seen is None else seen
        applied = storage.apply(read, ends, self.exact_count, now_ms, list_keys=self.list_keys)
        if seen is not None:  # after the commit: the batch is visible to queries
            self.sink.publish(storage, seen.records)
        failures = 0 if transformed is None else transformed.failures
        return SourceBatch(applied, events, failures, oldest)

    def _batch(self) -> list[Any]:
        consumer, config = self.consumer, self.config
        if self.restoring:
            msgs: list[Any] = consumer.consume(config.restore_batch_size, _RESTORE_WAIT)
            return msgs
        if self.flowing or self.busy:
            msgs = self._queued()
        else:  # idle: wait for a record, then take what came with it (the rest of its fetch)
            first = consumer.poll(config.poll_timeout)
            msgs = [] if first is None else [first, *self._queued()]
        self.flowing = bool(msgs)
        return msgs

    def _queued(self) -> list[Any]:
        """What is queued already, up to the batch's size, which follows the backlog."""
        msgs: list[Any] = self.consumer.consume(self.size.records, 0)
        # A message's len() is its value's: summed only when the batch came back full.
        self.size.after(len(msgs), lambda: sum(map(len, msgs)))
        return msgs

    def close(self) -> None:
        """Nothing to release."""
        pass  # the consumer is the thread's, closed when the thread ends


class FollowBatch:
    """How many records the next follow batch asks for. A full batch means more are queued:
    the follower is behind, so the next asks for twice as many (fewer hand-overs of the GIL
    a record, so falling behind makes it more efficient, not less), up to
    follow_batch_max records and follow_batch_max_bytes of values. Batches a quarter full or
    less halve it again, down to follow_batch_size."""

    def __init__(self, config: StoreConfig) -> None:
        self.least, self.most = config.follow_batch_size, config.follow_batch_max
        self.max_bytes = config.follow_batch_max_bytes
        self.records = self.least

    def after(self, count: int, held: Callable[[], int]) -> None:
        """Size the next batch after one of `count` messages whose values held `held()`
        bytes (asked only of a full batch)."""
        if count < self.records:
            if count <= self.records // 4:
                self.records = max(self.least, self.records // 2)
            return
        held_bytes = held()
        if held_bytes > self.max_bytes:
            self.records = max(self.least, self.records // 2)
        elif 2 * held_bytes <= self.max_bytes:
            self.records = min(self.most, 2 * self.records)


def split(messages: Sequence[Any]) -> tuple[MessageRecords, dict[int, int], list[Any]]:
    """A consumed batch as (its records, {partition: offset} of the partition ends it
    reached, its events: errors and ends)."""
    events = [m for m in messages if m.error() is not None]
    ends: dict[int, int] = {}
    if events:
        messages = [m for m in messages if m.error() is None]
        for event in events:
            if event.error().code() == KafkaError._PARTITION_EOF:
                p = event.partition()
                ends[p] = max(ends.get(p, 0), event.offset())
    return MessageRecords(messages), ends, events


class MessageRecords:
    """The records of consumed messages (events left out), each made as fill() reads it: a
    list of them, made first, cost 0.1 to 0.7 µs more a record (the garbage collector walks
    every tuple and header list kept)."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Sequence[Any]) -> None:
        self._messages = messages

    def __len__(self) -> int:
        return len(self._messages)

    def oldest_timestamp(self) -> int:
        """The smallest record timestamp (ms) of the messages (one at least)."""
        oldest: int = min(m.timestamp()[1] for m in self._messages)
        return oldest

    def __iter__(self) -> Iterator[Record]:
        messages = self._messages
        if not messages:
            return
        # On a header name that is not UTF-8, confluent-kafka's Message.headers() returns a list
        # whose tuple lacks its name, with the UnicodeDecodeError still set. m.headers() in a
        # loop, once the interpreter specialises the call, takes that list unchecked: the error
        # surfaces at some later call, or the empty slot crashes the process. map's call is
        # checked and raises SystemError at once; the message keeps the broken list and is
        # never asked again.
        headers_of = type(messages[0]).headers
        ours, theirs = iter(messages), iter(messages)
        while True:
            try:
                for m, headers in zip(ours, map(headers_of, theirs), strict=True):
                    yield (m.key(), m.value(), headers, m.partition(), m.offset(), m.timestamp()[1])
                return
            except SystemError:  # that header name: both iterators are past its message
                m = messages[len(messages) - theirs.__length_hint__() - 1]  # type: ignore[attr-defined]
                yield (m.key(), m.value(), UNREADABLE_HEADERS, m.partition(), m.offset(),
                       m.timestamp()[1])  # fmt: skip


class Seen:
    """Records as storage reads them (transformed, if the store transforms), each kept for
    the change feeds as it goes by."""

    __slots__ = ("_of", "records")

    def __init__(self, of: Records) -> None:
        self._of = of
        self.records: list[Record] = []

    def __len__(self) -> int:
        return len(self._of)

    def __iter__(self) -> Iterator[Record]:
        keep = self.records.append
        for record in self._of:
            keep(record)
            yield record


class NativeSource:
    """The C loop's batches. Restoring: full batches, each value transformed as the loop
    writes it if the store has a transform, while the thread's consumer (nothing assigned)
    is polled for its callbacks and an error it reports is handled like the C loop's.
    Following (follow(), stores that run no Python function per record only: follows_in_c):
    one consume call a batch, as ConsumerSource
    makes, that waits only while idle; the batch grows with the backlog; the live-key count
    stays exact. The C consumer's statistics go to `on_stats` as the thread's consumer's do."""

    def __init__(
        self,
        restorer: NativeRestorer,
        consumer: StoreConsumer,
        config: StoreConfig,
        on_stats: Callable[[str], None],
        transformer: transform.Transformer | None = None,
        *,
        exact_count: bool = False,
        can_follow: bool = False,
    ) -> None:
        """`exact_count`: restoring keeps the live-key count exact (a warm start);
        `can_follow`: the C loop can follow the store (follows_in_c): follow() goes on
        with it."""
        self.restorer, self.consumer, self.config, self.on_stats = (
            restorer, consumer, config, on_stats
        )  # fmt: skip
        self.transformed = None if transformer is None else transformer.native(restorer)
        self.exact_count, self.can_follow = exact_count, can_follow
        self.following = False
        self.busy = False
        self.flowing = False  # following: the last batch held something, more may be queued
        self.size = FollowBatch(config)
        self._polled = 0.0  # monotonic time the thread's consumer was last polled

    def follow(self) -> bool:
        """Go on as the store's follower from where the restore ended, if the C loop can
        follow the store; False when the thread's consumer must follow instead."""
        if self.can_follow:
            self.following = self.restorer.first = True
            log.info("following %s with the C loop", self.config.topic)
        return self.following

    def apply(self, storage: Storage, now_ms: int) -> SourceBatch:
        """Apply one batch of the C loop (restoring, or following), with the
        consumer events that came with it."""
        events = self._poll_consumer()
        transformed = self.transformed
        if self.following:
            applied = self._follow(storage, now_ms)
        else:
            batch = self.restorer if transformed is None else transformed
            applied = storage.apply_native(batch, _RESTORE_WAIT, now_ms, self.exact_count)
        stats = self.restorer.stats()
        if stats is not None:
            self.on_stats(stats)
        failures = 0 if transformed is None else transformed.failures
        oldest = self.restorer.oldest() if self.following else None
        return SourceBatch(applied, events + self.restorer.events, failures, oldest)

    def _follow(self, storage: Storage, now_ms: int) -> Applied:
        restorer = self.restorer
        restorer.limit = self.size.records
        wait = 0.0 if self.flowing or self.busy else self.config.poll_timeout
        batch = restorer if self.transformed is None else self.transformed
        applied = storage.apply_native(batch, wait, now_ms, exact_count=True)
        consumed = applied.records + len(restorer.events)
        self.flowing = consumed > 0
        self.size.after(consumed, restorer.held)
        return applied

    def _poll_consumer(self) -> list[Any]:
        """Serve the thread's consumer's callbacks: every batch while restoring, once a
        second while following (each poll hands the GIL over; its queue only holds the
        statistics and errors of a consumer with nothing assigned)."""
        now = time.monotonic()
        if self.following and now - self._polled < 1.0:
            return []
        self._polled = now
        event = self.consumer.poll(0)
        return [] if event is None else [event]

    def close(self) -> None:
        """Close the C loop and its consumer."""
        self.restorer.close()


def native_source(
    config: StoreConfig,
    consumer_conf: dict[str, Any],
    plan: Plan,
    list_keys: bool,
    consumer: StoreConsumer,
    on_stats: Callable[[str], None],
) -> NativeSource | None:
    """The C loop, or None: the Python loop restores when a listener wants the changes, the C
    loop is turned off or not built, a setting is a Python callable, or the count is exact
    (a warm start) for a store the C loop cannot follow. A transform function runs in Python
    on each value the C loop writes; a store with history has each record's version written
    beside its value (storage/history.py). The C loop goes on to follow a store that runs no
    Python function per record (follows_in_c, NativeSource.follow)."""
    in_c = follows_in_c(config)
    if list_keys or not config.native_restore or (plan.exact_count and not in_c):
        return None
    conf = native.native_settings(consumer_conf)
    why = native.load() if conf is not None else "a Kafka setting is a callable"
    if conf is None or why is not None:
        log.info("restoring %s with the Python loop: %s", config.topic, why)
        return None
    shaper = transform.transformer(config)
    log.info("restoring %s with the C loop%s", config.topic, "" if shaper is None else
             ", transforming each value in Python")  # fmt: skip
    capacity = max(config.restore_batch_size, config.follow_batch_max if in_c else 0)
    restorer = NativeRestorer(conf, config.topic, plan.start_offsets, capacity)
    restorer.limit = config.restore_batch_size
    return NativeSource(
        restorer, consumer, config, on_stats, shaper, exact_count=plan.exact_count, can_follow=in_c
    )


def follows_in_c(config: StoreConfig) -> bool:
    """Whether a store runs no user function on its records (no transform or index function;
    a declared transform or index runs in C: shaping/fields.py) and keeps no time index:
    the C loop can follow it (with history too: each version is written in C beside its
    value). Following in C, a record costs no Message object, and the follower hands the GIL
    over once a batch, in its consume call."""
    return (
        (config.transform is None or isinstance(config.transform, Shape))
        and all(isinstance(fn, str) for fn in config.indexes.values())
        and config.ttl is None
    )
