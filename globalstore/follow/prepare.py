"""Preparing a store for its loop: reach the broker, decide the plan, and make the storage fit
it — wipe it, refill it from a peer's snapshot, initialise it, begin its migrations.

The store thread runs this first, then its loop over the plan (thread.py). Planning itself is
pure (plan.py); this is where its decisions are carried out, before any record is applied.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from globalstore import tracing
from globalstore.config import OnUnreadable, StoreConfig
from globalstore.errors import BrokerUnavailable, DamagedLayoutError, UnreadableStore
from globalstore.follow import plan, topic
from globalstore.follow.health import Health
from globalstore.kafka.clients import LIBRDKAFKA_LOG, StoreConsumer, create_client
from globalstore.shaping import history, migrate, quarantine, transform, ttl
from globalstore.shaping.indexes import IndexBuild
from globalstore.snapshots import archive
from globalstore.storage import Storage

__all__ = ["Preparation", "Prepare", "Prepared"]

log = logging.getLogger(__name__)

_BROKER_RETRY_PAUSE = 0.5


@dataclass(frozen=True)
class Prepared:
    """What the loop runs: the plan, the migrations it begins with, and why the store was
    rebuilt (None: it resumed)."""

    plan: plan.Plan
    migration: migrate.Migration
    rebuild_reason: str | None = None
    indexing: IndexBuild | None = None  # builds the indexes not built yet, if any
    purge: ttl.Purge | None = None  # a store with a ttl: purges its expired keys
    prune: history.Prune | None = None  # a store with history: purges its old versions


# What a store thread calls to prepare: (its consumer, its stop event, a callback that
# publishes the health after a failed attempt) -> Prepared, or None if stopped first.
Prepare = Callable[[StoreConsumer, threading.Event, Callable[[], None]], Prepared | None]


class Preparation:
    """The preparation of a store against a real broker (thread.py's default)."""

    def __init__(
        self,
        config: StoreConfig,
        storage: Storage,
        health: Health,
        rpc_timeout: float = 5.0,
        bootstrap_from: str | Path | None = None,
    ) -> None:
        self.config, self.storage, self.health = config, storage, health
        self.rpc_timeout = rpc_timeout  # per broker request
        self.bootstrap_from = bootstrap_from  # a peer snapshot to rebuild from, if any

    def __call__(
        self, consumer: StoreConsumer, stopped: threading.Event, on_retry: Callable[[], None]
    ) -> Prepared | None:
        """Retry while the broker is unreachable; start() decides when to give up."""
        config = self.config
        # Needed only here: dropped after.
        admin_conf = {**config.admin_config(), "logger": LIBRDKAFKA_LOG}
        admin = create_client(AdminClient, admin_conf, "admin client")
        while not stopped.is_set():
            try:
                info = topic.describe_topic(
                    consumer, admin, config, self.rpc_timeout, self._answered
                )
                topic.check_compaction(info, config)
                marks = topic.watermarks(consumer, admin, config, info.partitions, self.rpc_timeout)
            except BrokerUnavailable as exc:
                self._refuse_if_unauthenticated(consumer)
                self.health.last_error = str(exc)  # what it waits for, and the client's words
                on_retry()
                stopped.wait(_BROKER_RETRY_PAUSE)
                continue
            self.health.reached()
            return self._prepare(info, marks, stopped)
        return None

    def _answered(self) -> None:
        """A broker answered: a start that times out now is not BrokerUnavailable."""
        self.health.ever_connected = True

    def _refuse_if_unauthenticated(self, consumer: StoreConsumer) -> None:
        """AuthenticationError when no broker was ever reached and librdkafka said why: the
        credentials or a certificate were refused. Otherwise start() would time out after
        its whole timeout, blaming the network."""
        consumer.poll(0)  # serves the error callback, which records what librdkafka saw
        if not self.health.ever_connected:
            self.health.refusals.check()

    def _prepare(
        self, info: topic.TopicInfo, marks: Mapping[int, topic.Marks], stopped: threading.Event
    ) -> Prepared:
        """Resume, or wipe and start over (WARNING) when resuming could leave the store
        different from the topic: from the peer snapshot if one was given (checked like any
        store, so an unfit one is wiped in turn), else from the beginning of the topic.
        Stopping the thread stops a snapshot install (then the store restores from Kafka)."""
        storage, config = self.storage, self.config
        self._refuse_if_unreadable()
        snapshots = [] if self.bootstrap_from is None else [self.bootstrap_from]
        reason = None
        while (rebuild := self._rebuild_reason(info, marks)) is not None:
            source = snapshots.pop() if snapshots else None
            log.warning(
                "rebuilding store %s from %s: %s",
                storage.path,
                f"snapshot {source}" if source else f"the beginning of {config.topic}",
                rebuild.reason,
            )
            reason = rebuild.reason
            if source is None:
                storage.wipe()
                continue
            with tracing.phase(
                "globalstore.snapshot.install",
                {"globalstore.path": str(storage.path), "globalstore.rebuild_reason": reason},
            ):
                storage.wipe(functools.partial(archive.install, source, cancel=stopped))
        meta = storage.read_meta()
        if meta.layout is None:  # a new (or just wiped) store
            more = {**transform.meta_entries(config), **quarantine.meta_entries(config)}
            storage.initialise(config.topic, info.topic_id, int(time.time() * 1000), more)
            meta = storage.read_meta()
        storage.load(meta)
        restore_plan = plan.plan(meta, info, marks, config)
        # Before any record is applied: the meta must name what readers need first.
        migration = migrate.Migration(storage, config.value_formats(), config.topic)
        migration.begin()
        storage.define(bulk=not restore_plan.exact_count, now_ms=int(time.time() * 1000))
        indexing = IndexBuild(storage.indexes, config.index_build_chunk)
        return Prepared(
            restore_plan, migration, reason, indexing, _ttl_purge(storage), _history_prune(storage)
        )

    def _refuse_if_unreadable(self) -> None:
        if self.config.unreadable_store is not OnUnreadable.REFUSE:
            return
        try:
            meta = self.storage.read_meta()
        except DamagedLayoutError:
            return  # damage is not a newer version's doing: rebuilt as always
        reason = migrate.unreadable_reason(meta, self.config.value_formats())
        if reason is not None:
            raise UnreadableStore(
                f"store {self.storage.path}: {reason}. It was left as it is "
                "(unreadable_store='refuse'): run a version that reads it, or set "
                "unreadable_store='rebuild' to rebuild it from the topic"
            )

    def _rebuild_reason(
        self, info: topic.TopicInfo, marks: Mapping[int, topic.Marks]
    ) -> plan.Rebuild | None:
        try:
            meta = self.storage.read_meta()
        except DamagedLayoutError as exc:
            return plan.Rebuild(f"store metadata is damaged ({exc})")
        return plan.rebuild_reason(meta, self.storage.is_empty(), info, marks, self.config)


def _ttl_purge(storage: Storage) -> ttl.Purge | None:
    """The purge of the expired keys of a store whose rules keep a ttl (None without one),
    which builds the time index first."""
    ttl_ms = storage.rules.ttl_ms
    return None if ttl_ms is None else ttl.Purge(storage.time, ttl_ms)


def _history_prune(storage: Storage) -> history.Prune | None:
    """The purge of the versions older than the window of a store whose rules keep history
    (None without)."""
    history_ms = storage.rules.history_ms
    if history_ms is None:
        return None
    # A sweep reads every version: between two, a tenth of the window (from 1 s to 1 min),
    # so the versions past it wait at most that much longer for their space.
    idle = min(60.0, max(1.0, history_ms / 10_000))
    return history.Prune(storage.history, history_ms, idle=idle)
