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

from globalstore import tracing
from globalstore.config import StoreConfig
from globalstore.errors import BrokerUnavailable, GlobalStoreError, StartTimeout
from globalstore.follow import events, health
from globalstore.follow.chores import Chores
from globalstore.follow.consumer_source import ConsumerSource
from globalstore.follow.delays import RECENT_BATCHES, FollowedBatch, RecordDelays
from globalstore.follow.native_source import NativeSource, native_source
from globalstore.follow.prepare import Preparation, Prepare, Prepared
from globalstore.follow.progress import Estimate, RestoreLog
from globalstore.follow.sources import NO_SINK, BatchSource, ChangeSink, SourceBatch
from globalstore.kafka.clients import StoreConsumer, create_client
from globalstore.listeners import StoreListener, fan_out, wants_changes
from globalstore.shaping import ttl
from globalstore.shaping.migrate import Migration
from globalstore.status import Delays, Progress, State, enter
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
    # While it restores (or rebuilds, or migrates): how far, at what rate, and the ETA.
    progress: Progress | None = None
    # Following: how long its records took from their timestamp to being applied.
    delays: Delays | None = None

    def not_ready(self, topic: str, where: str, timeout: float) -> GlobalStoreError:
        """The error of a start() this thread did not finish within `timeout` seconds."""
        if not self.ever_connected:
            return BrokerUnavailable(
                f"no Kafka broker answered at {where} within {timeout}s "
                f"(last error: {self.last_error})"
            )
        return StartTimeout(
            f"store for {topic!r} at {where} did not finish restoring within "
            f"{timeout}s (state {self.state.value}, last error: {self.last_error})"
        )

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
        feeds: ChangeSink = NO_SINK,
    ) -> None:
        """`rpc_timeout` bounds each broker request while preparing; `bootstrap_from` is a
        peer snapshot to rebuild from. `prepare` replaces the preparation (tests). `feeds`
        get the records of each batch applied while following (the store's change feeds)."""
        super().__init__(name=f"globalstore-{config.topic}", daemon=True)
        self.config, self.storage, self.on_applied = config, storage, on_applied
        self.listener = fan_out(listeners)
        self._list_keys = any(wants_changes(listener) for listener in listeners)
        self._health = health.for_store(config)
        self._prepare = prepare or Preparation(
            config, storage, self._health, rpc_timeout, bootstrap_from
        )
        self._consumer_factory = consumer_factory
        self._feeds = feeds
        self.ready = threading.Event()  # set when RUNNING, or when the thread ends
        self.status = ThreadStatus()
        self._state = State.CREATED
        self._error: BaseException | None = None
        self._stop_event = threading.Event()
        self._prepared: Prepared | None = None
        self._restored_at_ms: int | None = None
        self._skipped = 0
        self._transform_failures = 0
        self._restore: RestoreLog | None = None  # from the start of the loop
        self._migrating: Estimate | None = None  # once ready, while a migration runs
        self._delays = RecordDelays()
        # The batches followed last, oldest first. Read by the writer's note on this thread
        # and on the heartbeat's: replaced whole, never changed in place.
        self.recent_batches: tuple[FollowedBatch, ...] = ()
        self._span: tracing.Phase | None = None  # the restore's, from the start of the loop
        self._chores = Chores(
            config, storage, self.listener, self._list_keys, on_applied, self._publish
        )
        self._python_wanted = False  # a change feed needs each record: no C loop following
        self._in_python = threading.Event()  # set once the C loop no longer follows

    def follow_in_python(self, timeout: float) -> bool:
        """Have the thread's own consumer follow from its next batch on (a change feed needs
        each record, which the C loop does not hand out); True once it does."""
        self._python_wanted = True
        return self._in_python.wait(timeout)

    def stop(self) -> None:
        """Ask the thread to end; it does after the batch in hand (join() waits for it)."""
        self._stop_event.set()

    def _publish(self) -> None:
        purge, counts = self._chores.purge, (self._skipped, self._transform_failures)
        self.status = _status(self._state, self._error, self._health, self._prepared, purge,
                              self._restored_at_ms, counts, self._progress(),
                              self._delays.snapshot())  # fmt: skip

    def _progress(self) -> Progress | None:
        """How far the restore is while restoring; how far the migration is while one runs."""
        if self._state is State.RESTORING and self._restore is not None:
            return self._restore.progress(self.storage.state.positions)
        migration = None if self._prepared is None else self._prepared.migration
        if self._state is not State.RUNNING or migration is None or not migration.pending:
            self._migrating = None
            return None
        if self._migrating is None:
            # Values to convert: at most the live keys (fewer when it resumes a migration).
            self._migrating = Estimate("migration", self.storage.state.count or 0)
        return self._migrating.progress(migration.converted)

    def _enter(self, new: State) -> None:
        old, self._state = self._state, enter(self._state, new)
        self._publish()
        try:
            self.listener.on_state_change(self.config.topic, old, new)
        except Exception:
            if new not in (State.FAILED, State.CLOSED):
                raise  # fails the thread like any listener error
            log.exception("state listener failed on %s becoming %s", self.config.topic, new)

    def run(self) -> None:
        """Restore or resume, then follow until stop(); an error that ends the thread is kept for
        start() and status()."""
        consumer: StoreConsumer | None = None
        try:
            self._enter(State.STARTING)
            conf = {**self.config.consumer_config(), **self._health.callbacks()}
            consumer = create_client(self._consumer_factory, conf, "consumer")
            prepared = self._prepare(consumer, self._stop_event, self._publish)
            if prepared is not None:
                self._prepared = prepared
                self._loop(consumer, prepared, conf)
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
            self._in_python.set()  # no C loop follows any more
            self.on_applied()  # wakes the waiters, which then see it stopped
            if consumer is not None:
                consumer.close()

    def _loop(self, consumer: StoreConsumer, prepared: Prepared, conf: dict[str, Any]) -> None:
        plan, config, known = prepared.plan, self.config, self._health
        follow = ConsumerSource(consumer, config, plan.exact_count, self._list_keys, self._feeds)
        native = native_source(config, conf, plan, self._list_keys, consumer, known.on_stats)
        source: BatchSource = follow if native is None else native
        if native is None:
            follow.assign(plan.start_offsets)
            self._in_python.set()
        known.high = dict(plan.end_offsets)
        self._enter(State.RESTORING)
        phase = "restore" if prepared.rebuild_reason is None else "rebuild"
        self._restore = RestoreLog(config.topic, self.storage.path, plan, phase)
        span = self._span = tracing.Phase(
            f"globalstore.{phase}",
            {
                "globalstore.topic": config.topic,
                "globalstore.path": str(self.storage.path),
                "globalstore.offsets_to_read": plan.records_to_restore,
                "globalstore.rebuild_reason": prepared.rebuild_reason or "",
            },
        )
        self.listener.on_restore_start(config.topic, plan.start_offsets, plan.end_offsets)
        try:
            source = self._maybe_ready(source, follow)
            next_metadata = time.monotonic() + config.metadata_interval
            while not self._stop_event.is_set():
                wanted = self._python_wanted or self._feeds.active  # feeds need each record
                if wanted and source is not follow and self.ready.is_set():
                    source = self._to_consumer(source, follow)
                self._report(source.apply(self.storage, _now_ms()))
                now = time.monotonic()
                if self._state is State.RESTORING:
                    source = self._maybe_ready(source, follow)
                else:  # following: note the sync, take a step of the chores
                    source.busy = self._chores.step(now, self._health)
                if now >= next_metadata:
                    next_metadata = now + config.metadata_interval
                    source = self._discover_partitions(source, follow)
                self._publish()
        except BaseException as exc:
            span.end(exc)
            raise
        finally:
            span.end(None, {"globalstore.completed": False})  # stopped while restoring
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
        if self._list_keys and applied.present:
            upserted = [key.decode() for key, live in applied.present.items() if live]
            deleted = [key.decode() for key, live in applied.present.items() if not live]
            self.listener.on_changes(self.config.topic, upserted, deleted)
        if applied.records and batch.oldest_ms is not None:
            # Before on_applied(): the note it sends says it.
            recent = self.recent_batches
            number = recent[-1].number + 1 if recent else 1
            latest = FollowedBatch(number, batch.oldest_ms, applied.records)
            self.recent_batches = (*recent[1 - RECENT_BATCHES :], latest)
        if applied.records or applied.moved:  # an end alone moves the position too
            self.on_applied()
        if applied.records:
            if batch.oldest_ms is not None:
                self._delays.observe((_now_ms() - batch.oldest_ms) / 1000, applied.records)
            if restoring and self._restore is not None:
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
            source = self._to_consumer(source, follow)
        follow.restoring = False
        self._chores.queue(prepared, recount=not follow.exact_count)
        follow.exact_count = True
        self._restored_at_ms = _now_ms()
        self.storage.mark_restored(self._restored_at_ms)
        restore = self._restore
        seconds = 0.0 if restore is None else restore.done()
        records = 0 if restore is None else restore.records
        if self._span is not None:
            self._span.end(None, {"globalstore.records": records, "globalstore.completed": True})
        self.listener.on_restore_end(self.config.topic, records, seconds)
        self._health.in_sync_at = time.monotonic()
        self._enter(State.RUNNING)
        self.ready.set()
        self.on_applied()  # wakes those waiting until ready
        return source

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
            self._to_consumer(source, follow)
        follow.add_partitions(new)
        return follow

    def _to_consumer(self, source: BatchSource, follow: ConsumerSource) -> ConsumerSource:
        """The thread's consumer in the C loop's place, from the stored positions."""
        assert self._prepared is not None  # set before the loop runs
        starts, positions = self._prepared.plan.start_offsets, self.storage.state.positions
        self._in_python.set()
        return follow.take_over(source, starts, positions)


def _drop_locals(exc: BaseException) -> None:
    """Clear the locals of the finished frames `exc` (and its causes) passed through. The
    error is kept for status() as long as the store lives, and a RocksDB handle in one of
    those frames (a column family, an iterator) would keep the database's LOCK after close:
    a new start in this process would then be told the store is locked."""
    seen: BaseException | None = exc
    while seen is not None:
        traceback.clear_frames(seen.__traceback__)
        seen = seen.__cause__ or seen.__context__


def _status(
    state: State,
    error: BaseException | None,
    h: health.Health,
    prepared: Prepared | None,
    purge: ttl.Purge | None,
    restored_at_ms: int | None,
    counts: tuple[int, int],
    progress: Progress | None,
    delays: Delays,
) -> ThreadStatus:
    """The thread's picture: `counts` are the records skipped and the transform's failures."""
    return ThreadStatus(
        state=state,
        error=error,
        high=dict(h.high),
        connected=h.connected,
        ever_connected=h.ever_connected,
        in_sync_at=h.in_sync_at,
        last_error=h.last_error,
        restored_at_ms=restored_at_ms,
        rebuild_reason=None if prepared is None else prepared.rebuild_reason,
        skipped_records=counts[0],
        transform_failures=counts[1],
        purged=0 if purge is None else purge.purged,
        progress=progress,
        delays=delays,
        **({} if prepared is None else _migration_status(prepared.migration)),
    )


def _migration_status(migration: Migration) -> dict[str, Any]:
    return {
        "migration": migration.describe,
        "migrated_values": migration.converted,
        "conversion_failures": migration.failures,
    }


def _now_ms() -> int:
    return int(time.time() * 1000)
