"""Where the store thread's batches come from: a BatchSource consumes one batch and applies it
to the storage. Two implement it, and the thread's loop runs the same way over either:

    ConsumerSource   the thread's own consumer (Python, consumer_source.py): restores, then
                     follows
    NativeSource     the C loop (native.py) with a consumer of its own (native_source.py):
                     restores, then follows a store that runs no Python function per record
                     (no transform or index function: a declared one runs in C; no ttl or
                     change listener); for any other store the thread's consumer takes over

The C loop is about twice as fast, holds the GIL for less of each record (it makes no
Message objects), and writes exactly what the Python loop writes (docs/store.md,
"Performance notes"). This module holds what both share: the protocol, what a batch did,
where the changes go, and how large a follow batch is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from globalstore.config import StoreConfig
from globalstore.storage import Applied, Record, Storage

__all__ = [
    "NO_SINK",
    "RESTORE_WAIT",
    "BatchSource",
    "ChangeSink",
    "FollowBatch",
    "SourceBatch",
]

RESTORE_WAIT = 0.05  # seconds a restoring source waits for its first record


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
