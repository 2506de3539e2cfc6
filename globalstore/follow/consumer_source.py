"""The thread's own consumer as a batch source (sources.py): where confluent-kafka's messages
become plain records (storage/ never sees a message). `split` keeps the events (errors,
partition ends) apart and turns each partition end into an offset reached; a store's
transform (transform.py) runs on the records as storage reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from globalstore.codec import UNREADABLE_HEADERS
from globalstore.config import StoreConfig
from globalstore.follow.sources import (
    NO_SINK,
    RESTORE_WAIT,
    BatchSource,
    ChangeSink,
    FollowBatch,
    SourceBatch,
)
from globalstore.kafka.clients import StoreConsumer
from globalstore.shaping import transform
from globalstore.storage import Record, Records, Storage

__all__ = ["ConsumerSource", "MessageRecords", "Seen", "split"]


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
            msgs: list[Any] = consumer.consume(config.restore_batch_size, RESTORE_WAIT)
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
    list of them, made first, cost more a record (the garbage collector walks every tuple
    and header list kept; docs/store.md, "Performance notes")."""

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
