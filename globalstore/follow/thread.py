"""The store's background thread: a loop over a batch source, nothing else.

It prepares the store first (prepare.py: plan, wipe, snapshot, migrations), then runs ONE
loop for restore and follow: take a batch from the source (sources.py: the Python consumer or
the C loop), apply it with its offsets, report what it held. Restoring ends once the plan's
end offsets are reached (ready is signalled once); following then does its chores (a recount,
a migration) between batches, and looks for new partitions now and then.

The thread publishes what it knows as one immutable ThreadStatus after every change; the
facade reads that snapshot and never the thread's working fields. Its consumer comes from a
factory, and its preparation can be given, so unit tests drive it without a broker.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from globalstore import status as state
from globalstore.config import StoreConfig
from globalstore.errors import GlobalStoreError
from globalstore.follow import events
from globalstore.follow.chores import Chores
from globalstore.follow.health import Health
from globalstore.follow.prepare import Preparation, Prepare, Prepared
from globalstore.follow.progress import RestoreLog
from globalstore.follow.sources import (
    BatchSource,
    ConsumerSource,
    NativeSource,
    SourceBatch,
    native_source,
)
from globalstore.kafka.clients import LIBRDKAFKA_LOG, Refusals, StoreConsumer, create_client
from globalstore.listeners import StoreListener, fan_out, wants_changes
from globalstore.shaping.migrate import Migration
from globalstore.status import State
from globalstore.storage import Storage

__all__ = ["StoreThread", "ThreadStatus"]

log = logging.getLogger(__name__)

# A following thread that has not found itself in sync for this long cannot tell it still is.
_LOOKS_S = 1.0


@dataclass(frozen=True)
class ThreadStatus:
    """One consistent picture of the thread, replaced (never mutated) on every change."""

    state: State = State.CREATED
    error: BaseException | None = None
    high: Mapping[int, int] = field(default_factory=dict)  # the topic's last known end
    connected: bool = False
    ever_connected: bool = False
    in_sync_at: float | None = None  # monotonic
    last_error: str | None = None
    restored_at_ms: int | None = None
    rebuild_reason: str | None = None  # of the last rebuild this thread performed
    skipped_records: int = 0  # records not applied because their key is not UTF-8
    migration: str | None = None  # the background conversion under way, if any
    migrated_values: int = 0  # values it has rewritten since this start
    conversion_failures: int = 0  # values a converter raised on (kept as they were)
    transform_failures: int = 0  # records the transform raised on (their keys kept)
    purged: int = 0  # expired keys deleted since this start (ttl.py)

    def staleness(self, lag: Mapping[int, int]) -> float | None:
        """Seconds since the thread last held the topic's end while connected: 0 while it
        does, None if it never did since it started following. It looks after every batch
        and every poll_timeout while idle, and learns the topic's end at least every second:
        one that has not looked for longer (held up, or starved of the GIL) does not know it
        is in sync."""
        if self.in_sync_at is None:
            return None
        since = time.monotonic() - self.in_sync_at
        in_sync = self.connected and not any(lag.values()) and since <= _LOOKS_S
        return 0.0 if in_sync else since


class StoreThread(threading.Thread):
    """Owns the consumer. Call start(); wait on `ready`; stop() and join() to end."""

    def __init__(
        self,
        config: StoreConfig,
        storage: Storage,
        listeners: Sequence[StoreListener] = (),
        on_applied: Callable[[], None] = lambda: None,
        *,
        rpc_timeout: float = 5.0,
        bootstrap_from: str | Path | None = None,
        consumer_factory: Callable[[dict[str, Any]], StoreConsumer] = Consumer,
        prepare: Prepare | None = None,
    ) -> None:
        """`rpc_timeout` bounds each broker request while preparing; `bootstrap_from` is a
        peer snapshot to rebuild from. `prepare` replaces the preparation (tests)."""
        super().__init__(name=f"globalstore-{config.topic}", daemon=True)
        self.config, self.storage, self.on_applied = config, storage, on_applied
        self.listener = fan_out(listeners)
        self._report_changes = any(wants_changes(listener) for listener in listeners)
        self._health = Health(config.topic, Refusals(config.bootstrap_servers, config.kafka_config))
        self._prepare = prepare or Preparation(
            config, storage, self._health, rpc_timeout, bootstrap_from
        )
        self._consumer_factory = consumer_factory
        self.ready = threading.Event()  # set when RUNNING, or when the thread ends
        self.status = ThreadStatus()
        self._state = State.CREATED
        self._error: BaseException | None = None
        self._stop_event = threading.Event()
        self._prepared: Prepared | None = None
        self._restored_at_ms: int | None = None
        self._skipped = 0
        self._transform_failures = 0
        self._restore: RestoreLog  # from the start of the loop
        self._chores = Chores(
            storage, self.listener, self._report_changes, on_applied, self._publish
        )
        self._last_mark = time.monotonic()

    def stop(self) -> None:
        self._stop_event.set()

    def _publish(self) -> None:
        h, prepared = self._health, self._prepared
        self.status = ThreadStatus(
            state=self._state,
            error=self._error,
            high=dict(h.high),
            connected=h.connected,
            ever_connected=h.ever_connected,
            in_sync_at=h.in_sync_at,
            last_error=h.last_error,
            restored_at_ms=self._restored_at_ms,
            rebuild_reason=None if prepared is None else prepared.rebuild_reason,
            skipped_records=self._skipped,
            transform_failures=self._transform_failures,
            purged=0 if self._chores.purge is None else self._chores.purge.purged,
            **({} if prepared is None else _migration_status(prepared.migration)),
        )

    def _enter(self, new: State) -> None:
        old, self._state = self._state, state.enter(self._state, new)
        self._publish()
        try:
            self.listener.on_state_change(self.config.topic, old, new)
        except Exception:
            if new not in (State.FAILED, State.CLOSED):
                raise  # fails the thread like any listener error
            log.exception("state listener failed on %s becoming %s", self.config.topic, new)

    def run(self) -> None:
        consumer: StoreConsumer | None = None
        try:
            self._enter(State.STARTING)
            consumer = create_client(self._consumer_factory, self._consumer_config(), "consumer")
            prepared = self._prepare(consumer, self._stop_event, self._publish)
            if prepared is not None:
                self._prepared = prepared
                self._loop(consumer, prepared)
            self._enter(State.CLOSED)
        except BaseException as exc:  # surfaced through start()/status(), never swallowed
            _drop_locals(exc)
            self._error = exc
            self._health.last_error = f"{type(exc).__name__}: {exc}"
            # It reads nothing from now on: not connected, its staleness grows from the last
            # time it held the topic's end (else a stopped store would report itself fresh).
            self._health.connected = False
            self._enter(State.FAILED)
            if not isinstance(exc, GlobalStoreError):
                log.exception("store thread for %s died", self.config.topic)
        finally:
            self.ready.set()
            if consumer is not None:
                consumer.close()

    def _consumer_config(self) -> dict[str, Any]:
        h = self._health
        conf = {"stats_cb": h.on_stats, "error_cb": h.on_error, "logger": LIBRDKAFKA_LOG}
        return {**self.config.consumer_config(), **conf}

    def _loop(self, consumer: StoreConsumer, prepared: Prepared) -> None:
        plan, config, health = prepared.plan, self.config, self._health
        follow = ConsumerSource(consumer, config, plan.exact_count, self._report_changes)
        conf = self._consumer_config()
        native = native_source(config, conf, plan, self._report_changes, consumer, health.on_stats)
        source: BatchSource = follow if native is None else native
        if native is None:
            follow.assign(plan.start_offsets)
        health.high = dict(plan.end_offsets)
        self._enter(State.RESTORING)
        self._restore = RestoreLog(config.topic, self.storage.path, plan)
        self.listener.on_restore_start(config.topic, plan.start_offsets, plan.end_offsets)
        try:
            source = self._maybe_ready(source, follow)
            next_metadata = time.monotonic() + config.metadata_interval
            while not self._stop_event.is_set():
                self._report(source.apply(self.storage, _now_ms()))
                now = time.monotonic()
                if self._state is State.RESTORING:
                    source = self._maybe_ready(source, follow)
                else:  # following: note the sync, take a step of the chores
                    self._track_sync(now)
                    source.busy = self._chores.step()
                if now >= next_metadata:
                    next_metadata = now + config.metadata_interval
                    source = self._discover_partitions(source, follow)
                self._publish()
        finally:
            if source is not follow:
                source.close()

    def _report(self, batch: SourceBatch) -> None:
        restoring, applied = self._state is State.RESTORING, batch.applied
        for event in batch.events:
            events.handle(event, self.config, self._health, restoring)
        self._transform_failures += batch.transform_failures
        if applied.skipped:
            self._skipped += len(applied.skipped)
            events.log_skipped(self.config.topic, applied.skipped)
        if self._report_changes and applied.changed:
            upserted = [key.decode() for key, live in applied.changed.items() if live]
            deleted = [key.decode() for key, live in applied.changed.items() if not live]
            self.listener.on_changes(self.config.topic, upserted, deleted)
        if applied.records:
            self.on_applied()
            if restoring:
                positions = self.storage.state.positions
                self._restore.add(applied.records, positions)
                self.listener.on_batch_restored(self.config.topic, positions, applied.records)

    def _maybe_ready(self, source: BatchSource, follow: ConsumerSource) -> BatchSource:
        """`source` while the end offsets are not reached; then, ready, the follower: the C
        loop for a plain store, else the thread's consumer."""
        assert self._prepared is not None  # set before the loop runs
        prepared, positions = self._prepared, self.storage.state.positions
        if any(positions.get(p, 0) < end for p, end in prepared.plan.end_offsets.items()):
            return source
        if isinstance(source, NativeSource) and not source.follow():
            source = follow.take_over(source, prepared.plan.start_offsets, positions)
        follow.restoring = False
        recount = None if follow.exact_count else self.config.recount_chunk
        follow.exact_count = True
        self._chores.queue(prepared, self.config.topic, recount)
        self._restored_at_ms = _now_ms()
        self.storage.mark_restored(self._restored_at_ms)
        seconds = self._restore.done()
        self.listener.on_restore_end(self.config.topic, self._restore.records, seconds)
        self._health.in_sync_at = self._last_mark = time.monotonic()
        self._enter(State.RUNNING)
        self.ready.set()
        return source

    def _track_sync(self, now: float) -> None:
        # Record "in sync at this wall time" now and then, so a restart can tell a quiet
        # topic from a long absence (the delete.retention.ms check in plan.py).
        in_sync = self._health.track_sync(now, self.storage.state.positions)
        if in_sync and now - self._last_mark > self.config.heartbeat_interval:
            self._last_mark = now
            self.storage.mark_in_sync(_now_ms())

    def _discover_partitions(self, source: BatchSource, follow: ConsumerSource) -> BatchSource:
        """Pick up partitions added to the topic while running (the C loop, which cannot,
        hands over to the thread's consumer); not while the C loop restores."""
        if source is not follow and self._state is State.RESTORING:
            return source
        known = set(self._health.high) | set(self.storage.state.positions)
        new = events.new_partitions(follow.consumer, self.config.topic, known)
        if not new:
            return source
        log.warning("topic %s grew: following new partitions %s", self.config.topic, new)
        for p in new:
            self._health.high[p] = 0
        if source is not follow:
            assert self._prepared is not None  # set before the loop runs
            starts, positions = self._prepared.plan.start_offsets, self.storage.state.positions
            follow.take_over(source, starts, positions)
        follow.add_partitions(new)
        return follow


def _drop_locals(exc: BaseException) -> None:
    """Clear the locals of the finished frames `exc` (and its causes) passed through. The
    error is kept for status() as long as the store lives, and a RocksDB handle in one of
    those frames (a column family, an iterator) would keep the database's LOCK after close:
    a new start in this process would then be told the store is locked."""
    seen: BaseException | None = exc
    while seen is not None:
        traceback.clear_frames(seen.__traceback__)
        seen = seen.__cause__ or seen.__context__


def _migration_status(migration: Migration) -> dict[str, Any]:
    return {
        "migration": migration.describe,
        "migrated_values": migration.converted,
        "conversion_failures": migration.failures,
    }


def _now_ms() -> int:
    return int(time.time() * 1000)
