"""The C loop as a batch source (sources.py): native.py's restorer with a consumer of its own,
which restores any store the loop can write (a transform function runs in Python on each
value it writes), then follows a store that runs no Python function per record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from globalstore.config import StoreConfig
from globalstore.follow import native
from globalstore.follow.native import NativeRestorer
from globalstore.follow.plan import Plan
from globalstore.follow.sources import RESTORE_WAIT, FollowBatch, SourceBatch
from globalstore.kafka.clients import StoreConsumer
from globalstore.shaping import transform
from globalstore.shaping.fields import Shape
from globalstore.storage import Applied, Storage

__all__ = ["NativeSource", "follows_in_c", "native_source"]

log = logging.getLogger(__name__)


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
            applied = storage.apply_native(batch, RESTORE_WAIT, now_ms, self.exact_count)
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
    beside its value (storage/version_recorder.py). The C loop goes on to follow a store
    that runs no Python function per record (follows_in_c, NativeSource.follow)."""
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
