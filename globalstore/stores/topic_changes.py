"""The change feed of a SharedStore: the topic itself is the changelog.

A reader process does not see the writer's batches, only their effect (its RocksDB secondary
catches up). So its feeds read the topic with a consumer of their own, from the reader's
positions, and release each record once the reader shows its partition applied past it:
then a query here reads what the change says. That is exact because the stored value is the
record's value (with a header): a store with a transform stores other values than the
topic's, so its readers refuse a feed (the writer's GlobalStore.changes() has them).

When the reader moves to another copy (the writer rebuilt it, or restarted and its copy is
behind what was released), the feeds resync and reading starts again from the new copy's
positions. ReaderFeeds holds a reader's feeds and starts the reading for the first one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from globalstore import codec
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError
from globalstore.follow.consumer_source import split
from globalstore.kafka.clients import create_client
from globalstore.read.changes import ChangeFeed, Feeds, record_bytes
from globalstore.storage import Record, Storage

__all__ = ["ReaderFeeds", "TopicChanges"]

log = logging.getLogger(__name__)

_WAIT_S = 0.05  # longest consumer wait: the reader's position is looked at this often
_AHEAD = 100_000  # records read ahead of the reader at most
_AHEAD_BYTES = 32 << 20  # and bytes of them (record_bytes): reading pauses past either
_READ = 500  # records asked of the consumer at a time


class TopicChanges(threading.Thread):
    """Reads the topic for a reader's feeds and releases what the reader shows applied."""

    def __init__(
        self,
        config: StoreConfig,
        feeds: Feeds,
        positions: Callable[[], tuple[object, Mapping[int, int]]],
        consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
    ) -> None:
        """`positions()` says which copy the reader reads (any object; another one means it
        moved) and that copy's positions. `consumer_factory` makes the consumer (tests)."""
        super().__init__(name=f"globalstore-changes-{config.topic}", daemon=True)
        self.config, self.feeds, self.positions = config, feeds, positions
        self._consumer_factory = consumer_factory
        self._stopped = threading.Event()
        self._pending: dict[int, deque[Record]] = {}
        self._pending_bytes = 0  # of the records in _pending (record_bytes)
        self._next: dict[int, int] = {}  # per partition, the offset the consumer reads next

    def stop(self) -> None:
        """Ask the thread to end; it does within one consumer wait (50 ms)."""
        self._stopped.set()

    def run(self) -> None:
        """Read the topic from the reader's positions and release to the feeds what the reader shows
        applied, until stop(); a resync whenever the reader moves to another copy."""
        conf = {**self.config.consumer_config(), "enable.partition.eof": False}
        consumer = create_client(self._consumer_factory, conf, "consumer")
        try:
            copy, positions = self.positions()
            self._assign(consumer, positions)
            while not self._stopped.is_set():
                held = sum(map(len, self._pending.values()))
                room = held < _AHEAD and self._pending_bytes < _AHEAD_BYTES
                messages = consumer.consume(_READ, _WAIT_S) if room else []
                if not room:  # the reader is behind: wait for it to apply what is held
                    self._stopped.wait(_WAIT_S)
                self._keep(messages)
                now, positions = self.positions()
                if now is not copy or self._behind(positions):
                    copy = now
                    self.feeds.resync("the reader moved to another copy of the store")
                    self._assign(consumer, positions)
                    continue
                self._release(positions)
                if set(positions) - set(self._next):  # the topic grew
                    self._assign(consumer, positions)
        except Exception:
            log.exception("the change feed of %s stopped", self.config.path)
            self.feeds.resync("the reader's change feed stopped (see its log)")
            self.feeds.end()
        finally:
            consumer.close()

    def _assign(self, consumer: Any, positions: Mapping[int, int]) -> None:
        """Read every partition from `positions` on, nothing held."""
        self._pending = {p: deque() for p in positions}
        self._pending_bytes = 0
        self._next = dict(positions)
        topic = self.config.topic
        consumer.assign([TopicPartition(topic, p, o) for p, o in positions.items()])

    def _keep(self, messages: list[Any]) -> None:
        records, _, events = split(messages)
        for event in events:
            if event.error().code() != KafkaError._PARTITION_EOF:
                log.warning("change feed of %s: %s", self.config.topic, event.error())
        for record in records:
            p = record[3]
            self._pending[p].append(record)
            self._pending_bytes += record_bytes(record)
            self._next[p] = record[4] + 1

    def _behind(self, positions: Mapping[int, int]) -> bool:
        """The reader's copy is behind what the feeds were given (a restarted writer lost
        unflushed batches): what it applies again may differ, so they must re-read."""
        return any(positions.get(p, 0) < self._released(p) for p in self._next)

    def _released(self, p: int) -> int:
        pending = self._pending[p]
        return pending[0][4] if pending else self._next[p]

    def _release(self, positions: Mapping[int, int]) -> None:
        batch: list[Record] = []
        for p, pending in self._pending.items():
            applied = positions.get(p, 0)
            while pending and pending[0][4] < applied:
                batch.append(pending.popleft())
        self._pending_bytes -= sum(map(record_bytes, batch))
        self.feeds.publish(self, batch)


class ReaderFeeds:
    """A SharedStore's change feeds, and the reading of the topic behind them (TopicChanges),
    started for the first feed and stopped with the reader."""

    def __init__(
        self, path: Path, bootstrap_servers: str | None, kafka_config: Mapping[str, Any]
    ) -> None:
        """`path` is the reader's store; the Kafka settings are its writer's."""
        self.path = path
        self._kafka = (bootstrap_servers, dict(kafka_config))
        self.feeds = Feeds()
        self._reading: TopicChanges | None = None

    def subscribe(
        self, topic: str, decode: codec.Decode, prefix: str | None,
        keys: Iterable[str] | None, buffer: int,
    ) -> ChangeFeed:  # fmt: skip
        """A new feed (read_topic() has started the reading)."""
        return self.feeds.subscribe(topic, decode, prefix, keys, buffer)

    def read_topic(
        self,
        storage: Storage,
        topic: str,
        positions: Callable[[], tuple[object, Mapping[int, int]]],
    ) -> None:
        """Start reading `topic` for the feeds, unless already at it: ConfigurationError
        without bootstrap_servers, or for a store (`storage`) with a transform."""
        if self._reading is not None:
            return
        bootstrap, kafka_config = self._kafka
        if bootstrap is None:
            raise ConfigurationError(
                f"the shared store at {self.path} reads its changes from the topic: give it "
                "bootstrap_servers (and kafka_config) as its writer has them"
            )
        if storage.read_meta().transform_version is not None:
            raise ConfigurationError(
                f"the store at {self.path} has a transform: its values are not the topic's, "
                "so its readers have no change feed; the writer's GlobalStore.changes() has"
            )
        config = StoreConfig(topic, bootstrap, self.path, kafka_config=kafka_config)
        self._reading = TopicChanges(config, self.feeds, positions)
        self._reading.start()

    def stop(self) -> None:
        """Stop reading the topic and wait for the reading thread (the feeds stay open)."""
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.stop()
            reading.join()

    def end(self) -> None:
        """End every feed."""
        self.feeds.end()
