"""The store's background thread: plan, restore, then follow — with ONE poll loop.

Restoring and following differ only in batch size, how key counts are kept, and what happens
when the captured end offsets are reached (ready is signalled once). Everything else — consume,
apply batch + offsets in one WriteBatch, watch partitions and broker health — is shared.

The thread publishes what it knows as one immutable ThreadStatus after every change; the
facade reads that snapshot and never the thread's working fields.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from globalstore import migrate, native_restore, plan, snapshot, state, topic
from globalstore.config import OnUnreadable, StoreConfig
from globalstore.errors import (
    BrokerUnavailable,
    ConfigurationError,
    DamagedLayoutError,
    FatalError,
    GlobalStoreError,
    OffsetsOutOfRange,
    UnreadableStore,
)
from globalstore.health import Health
from globalstore.kafka_settings import mask_text
from globalstore.listeners import StoreListener, fan_out, wants_changes
from globalstore.native_restore import NativeRestorer
from globalstore.state import State
from globalstore.storage import Storage

log = logging.getLogger(__name__)
# librdkafka's own log lines (connection failures and the like, which the store retries and
# reports through status()) go to Python logging under this name instead of stderr.
LIBRDKAFKA_LOG = logging.getLogger("globalstore.librdkafka")
_C = TypeVar("_C")

_PROGRESS_LOG_INTERVAL = 5.0
_BROKER_RETRY_PAUSE = 0.5
_SKIPPED_LOGGED_PER_BATCH = 3  # the rest are counted in the status, not logged one by one


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


def _client(factory: Callable[[dict[str, Any]], _C], conf: dict[str, Any], role: str) -> _C:
    """A confluent-kafka client, or ConfigurationError naming the setting it refused
    (librdkafka checks names and values when the client is created, before any I/O)."""
    try:
        return factory(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        refusal = mask_text(str(exc), conf)
        raise ConfigurationError(f"the Kafka {role} refused its settings: {refusal}") from None


def _migration_status(migration: migrate.Migration | None) -> dict[str, Any]:
    if migration is None:
        return {}
    return {
        "migration": migration.describe,
        "migrated_values": migration.converted,
        "conversion_failures": migration.failures,
    }


def _now_ms() -> int:
    return int(time.time() * 1000)


class StoreThread(threading.Thread):
    """Owns the consumer. Call start(); wait on `ready`; stop() and join() to end."""

    def __init__(
        self,
        config: StoreConfig,
        storage: Storage,
        listeners: Sequence[StoreListener],
        on_applied: Callable[[], None],
        rpc_timeout: float = 5.0,
        bootstrap_from: str | Path | None = None,
    ) -> None:
        super().__init__(name=f"globalstore-{config.topic}", daemon=True)
        self.config = config
        self.storage = storage
        self.listener = fan_out(listeners)
        self._report_changes = any(wants_changes(listener) for listener in listeners)
        self.on_applied = on_applied
        self.rpc_timeout = rpc_timeout  # per broker request while planning
        self.bootstrap_from = bootstrap_from  # a peer snapshot to rebuild from, if any
        self.ready = threading.Event()  # set when RUNNING, or when the thread ends
        self.status = ThreadStatus()
        self._state = State.CREATED
        self._error: BaseException | None = None
        self._health = Health(config.topic)
        self._restored_at_ms: int | None = None
        self._rebuild_reason: str | None = None
        self._skipped = 0
        self._start_offsets: dict[int, int] = {}
        self._end_offsets: dict[int, int] = {}
        self._stop_event = threading.Event()
        self._restore_records = 0
        self._restore_began = 0.0
        self._exact_count = True
        self._migration: migrate.Migration | None = None
        self._migrating = False
        self._recounting = False
        self._last_mark = time.monotonic()
        self._native: NativeRestorer | None = None  # the C loop, during a bulk restore

    def stop(self) -> None:
        self._stop_event.set()

    def _publish(self) -> None:
        h = self._health
        self.status = ThreadStatus(
            state=self._state,
            error=self._error,
            high=dict(h.high),
            connected=h.connected,
            ever_connected=h.ever_connected,
            in_sync_at=h.in_sync_at,
            last_error=h.last_error,
            restored_at_ms=self._restored_at_ms,
            rebuild_reason=self._rebuild_reason,
            skipped_records=self._skipped,
            **_migration_status(self._migration),
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

    # -- thread body -------------------------------------------------------------------------

    def run(self) -> None:
        consumer: Consumer | None = None
        try:
            self._enter(State.STARTING)
            consumer = _client(Consumer, self._consumer_config(), "consumer")
            restore_plan = self._plan_with_retries(consumer)
            if restore_plan is not None:
                self._begin(consumer, restore_plan)
                self._loop(consumer)
            self._enter(State.CLOSED)
        except BaseException as exc:  # surfaced through start()/status(), never swallowed
            self._error = exc
            self._health.last_error = f"{type(exc).__name__}: {exc}"
            self._enter(State.FAILED)
            if not isinstance(exc, GlobalStoreError):
                log.exception("store thread for %s died", self.config.topic)
        finally:
            self.ready.set()
            if self._native is not None:
                self._native.close()
            if consumer is not None:
                consumer.close()

    def _consumer_config(self) -> dict[str, Any]:
        conf = self.config.consumer_config()
        conf["stats_cb"] = self._health.on_stats
        conf["error_cb"] = self._health.on_error
        conf["logger"] = LIBRDKAFKA_LOG
        return conf

    def _plan_with_retries(self, consumer: Consumer) -> plan.Plan | None:
        """Retry while the broker is unreachable; start() decides when to give up."""
        # Needed only here: dropped after.
        admin_conf = {**self.config.admin_config(), "logger": LIBRDKAFKA_LOG}
        admin = _client(AdminClient, admin_conf, "admin client")
        while not self._stop_event.is_set():
            try:
                info = topic.describe_topic(consumer, admin, self.config, self.rpc_timeout)
                topic.check_compaction(info, self.config)
                marks = topic.watermarks(
                    consumer, admin, self.config, info.partitions, self.rpc_timeout
                )
            except BrokerUnavailable as exc:
                self._refuse_if_unauthenticated(consumer)
                where = self.config.bootstrap_servers  # then the client's own words:
                self._health.last_error = f"{where}: {exc.__cause__ or exc}"
                self._publish()
                self._stop_event.wait(_BROKER_RETRY_PAUSE)
                continue
            self._health.reached()
            return self._plan(info, marks)
        return None

    def _refuse_if_unauthenticated(self, consumer: Consumer) -> None:
        """AuthenticationError when no broker was ever reached and librdkafka said why: the
        credentials or a certificate were refused. Otherwise start() would time out after
        its whole timeout, blaming the network."""
        consumer.poll(0)  # serves the error callback, which records what librdkafka saw
        failure = self._health.authentication_failure
        if failure is not None and not self._health.ever_connected:
            raise topic.unauthenticated(self.config, failure)

    def _plan(self, info: topic.TopicInfo, marks: Mapping[int, topic.Marks]) -> plan.Plan:
        """Resume, or wipe and start over (WARNING) when resuming could leave the store
        different from the topic: from the peer snapshot if one was given (checked like any
        store, so an unfit one is wiped in turn), else from the beginning of the topic."""
        storage = self.storage
        self._refuse_if_unreadable()
        snapshots = [] if self.bootstrap_from is None else [self.bootstrap_from]
        while (rebuild := self._rebuild_reason_now(info, marks)) is not None:
            source = snapshots.pop() if snapshots else None
            log.warning(
                "rebuilding store %s from %s: %s",
                storage.path,
                f"snapshot {source}" if source else f"the beginning of {self.config.topic}",
                rebuild.reason,
            )
            self._rebuild_reason = rebuild.reason
            storage.wipe(None if source is None else functools.partial(snapshot.install, source))
        meta = storage.read_meta()
        if meta.layout is None:  # a new (or just wiped) store
            storage.initialise(self.config.topic, info.topic_id, _now_ms())
            meta = storage.read_meta()
        storage.load(meta)
        return plan.plan(meta, info, marks, self.config)

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

    def _rebuild_reason_now(
        self, info: topic.TopicInfo, marks: Mapping[int, topic.Marks]
    ) -> plan.Rebuild | None:
        try:
            meta = self.storage.read_meta()
        except DamagedLayoutError as exc:
            return plan.Rebuild(f"store metadata is damaged ({exc})")
        return plan.rebuild_reason(meta, self.storage.is_empty(), info, marks, self.config)

    def _begin(self, consumer: Consumer, restore_plan: plan.Plan) -> None:
        self._start_offsets = dict(restore_plan.start_offsets)
        self._end_offsets = dict(restore_plan.end_offsets)
        self._health.high = dict(restore_plan.end_offsets)
        self._exact_count = restore_plan.exact_count
        # Before any record is applied: the meta must name what readers need first.
        self._migration = migrate.Migration(
            self.storage, self.config.value_formats(), self.config.topic
        )
        self._migration.begin()
        self._migrating = self._migration.pending
        name = self.config.topic
        self._native = self._native_restorer(restore_plan)
        if self._native is None:
            consumer.assign([TopicPartition(name, p, o) for p, o in self._start_offsets.items()])
        self._restore_began = time.monotonic()
        self._enter(State.RESTORING)
        log.info(
            "restoring %s into %s: %d records to reach end offsets %s%s",
            name,
            self.storage.path,
            restore_plan.records_to_restore,
            restore_plan.end_offsets,
            "" if restore_plan.exact_count else " (bulk: keys recounted once ready)",
        )
        self.listener.on_restore_start(name, restore_plan.start_offsets, restore_plan.end_offsets)
        self._maybe_ready(consumer)

    def _native_restorer(self, restore_plan: plan.Plan) -> NativeRestorer | None:
        """The C loop for a bulk restore (docs/store.md, "Performance notes"), or None: the
        Python loop restores when the count is exact, a listener wants the changes, the C
        loop is turned off or not built, or a setting is a Python callable."""
        if restore_plan.exact_count or self._report_changes or not self.config.native_restore:
            return None
        conf = native_restore.native_settings(self._consumer_config())
        why = native_restore.load() if conf is not None else "a Kafka setting is a callable"
        if conf is None or why is not None:
            log.info("restoring %s with the Python loop: %s", self.config.topic, why)
            return None
        log.info("restoring %s with the C loop", self.config.topic)
        return NativeRestorer(
            conf, self.config.topic, restore_plan.start_offsets, self.config.restore_batch_size
        )

    def _hand_over(self, consumer: Consumer) -> None:
        """Restored: close the C loop's consumer and follow from where it stopped."""
        if self._native is None:
            return
        self._native.close()
        self._native = None
        positions = self.storage.state.positions
        consumer.assign(
            [
                TopicPartition(self.config.topic, p, max(positions.get(p, start), start))
                for p, start in self._start_offsets.items()
            ]
        )

    def _loop(self, consumer: Consumer) -> None:
        next_metadata = time.monotonic() + self.config.metadata_interval
        next_progress = time.monotonic() + _PROGRESS_LOG_INTERVAL
        while not self._stop_event.is_set():
            if self._native is not None:
                # The store's consumer has nothing assigned yet: polling it serves the health
                # callbacks, and an error it reports is handled like the C loop's events.
                if (event := consumer.poll(0)) is not None:
                    self._on_event(event)
                applied = self.storage.apply_native(self._native, 0.05, _now_ms())
            else:
                applied = self.storage.apply(
                    self._next_batch(consumer),
                    self._exact_count,
                    _now_ms(),
                    changes=self._report_changes,
                )
            for event in applied.events:
                self._on_event(event)
            if applied.skipped:
                self._report_skipped(applied.skipped)
            if self._report_changes and applied.changed:
                self._report_changed(applied.changed)
            if applied.records:
                self.on_applied()
            now = time.monotonic()
            if self._state is State.RESTORING:
                if applied.records:
                    self._restore_records += applied.records
                    positions = self.storage.state.positions
                    self.listener.on_batch_restored(self.config.topic, positions, applied.records)
                    if now >= next_progress:
                        next_progress = now + _PROGRESS_LOG_INTERVAL
                        self._log_progress(positions)
                self._maybe_ready(consumer)
            else:
                self._track_sync(now)
                if self._recounting:
                    self._recount_step()
                elif self._migration is not None and self._migrating:
                    # Eager migration in small chunks, in this thread: never races an apply.
                    self._migrating = not self._migration.step()
            if now >= next_metadata and self._native is None:
                next_metadata = now + self.config.metadata_interval
                self._check_partitions(consumer)
            self._publish()

    def _next_batch(self, consumer: Consumer) -> list[Any]:
        """Restoring: big batches. Following: return as soon as one record arrives, plus
        whatever is already queued, so produce-to-visible latency stays a few ms."""
        if self._state is State.RESTORING:
            msgs: list[Any] = consumer.consume(self.config.restore_batch_size, 0.05)
            return msgs
        # No waiting while a recount or a migration has work to do between batches.
        busy = self._recounting or self._migrating
        first = consumer.poll(0 if busy else self.config.poll_timeout)
        if first is None:
            return []
        return [first, *consumer.consume(self.config.follow_batch_size, 0)]

    # -- restore completion ------------------------------------------------------------------

    def _maybe_ready(self, consumer: Consumer) -> None:
        positions = self.storage.state.positions
        if any(positions.get(p, 0) < end for p, end in self._end_offsets.items()):
            return
        self._hand_over(consumer)
        if not self._exact_count:
            # Counting 1M keys takes about a second: do it after ready, in chunks between
            # follow batches. From here on every apply is exact and adds its change to it.
            self.storage.begin_recount()
            self._exact_count = self._recounting = True
        self._restored_at_ms = _now_ms()
        self.storage.mark_restored(self._restored_at_ms)
        seconds = time.monotonic() - self._restore_began
        rate = self._restore_records / seconds if seconds > 0 else 0.0
        log.info(
            "restored %s: %d records in %.2fs (%.0f records/s); following",
            self.config.topic,
            self._restore_records,
            seconds,
            rate,
        )
        self.listener.on_restore_end(self.config.topic, self._restore_records, seconds)
        self._health.in_sync_at = self._last_mark = time.monotonic()
        self._enter(State.RUNNING)
        self.ready.set()

    def _recount_step(self) -> None:
        n = self.storage.recount_step(self.config.recount_chunk)
        if n is not None:
            self._recounting = False
            log.info("counted %d live keys in %s after a bulk restore", n, self.storage.path)
            self.on_applied()  # wakes count() callers waiting for the number

    def _log_progress(self, positions: Mapping[int, int]) -> None:
        reached = {p: min(positions.get(p, 0), e) for p, e in self._end_offsets.items()}
        log.info(
            "restoring %s: %d records so far, %d/%d offsets",
            self.config.topic,
            self._restore_records,
            topic.records_between(self._start_offsets, reached),
            topic.records_between(self._start_offsets, self._end_offsets),
        )

    # -- events, health, partitions ----------------------------------------------------------

    def _on_event(self, msg: Any) -> None:
        err = msg.error()
        if err.code() == KafkaError._PARTITION_EOF:
            self._health.raise_high(msg.partition(), msg.offset())
            return
        if err.code() == KafkaError._AUTO_OFFSET_RESET:
            # auto.offset.reset=error: the position is outside the partition's offsets. Going
            # on from anywhere else could keep keys the topic deleted, and rebuilding in place
            # would serve partial data: stop following and keep serving the last state; the
            # store rebuilds beside it (heal.py) or, with out_of_range="stop", the next
            # start() rebuilds (the plan sees the offsets out of range).
            log.error("offsets out of range on %s: %s", self.config.topic, err)
            raise OffsetsOutOfRange(
                f"partition {msg.partition()} of {self.config.topic}: {err}. The topic no longer "
                "holds the store's position (records deleted or topic recreated); the store "
                "serves its last state while it rebuilds beside it (out_of_range='rebuild') or "
                "until restarted (out_of_range='stop')"
            )
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            # librdkafka looks up the coordinator of the (random) group.id a consumer must
            # have; the store never joins or commits, so a principal without group ACLs is fine.
            log.debug("consumer on %s: %s (the store uses no group)", self.config.topic, err)
            return
        if topic.denied(err) and self._state is State.RESTORING:
            # No READ ACL: librdkafka would back off and retry for ever, and start() time
            # out as if the broker were down. Once running, a revoked grant is logged below
            # as an error while librdkafka keeps retrying; the store serves its last state.
            raise topic.refused(self.config, "Read", err)
        self._health.last_error = str(err)
        if err.fatal() or err.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
        ):
            log.error("consumer error on %s: %s", self.config.topic, err)
            if err.fatal():
                raise FatalError(f"fatal Kafka error on {self.config.topic}: {err}")
            return
        log.warning("consumer error on %s: %s", self.config.topic, err)

    def _report_changed(self, changed: dict[bytes, bool]) -> None:
        upserted = [key.decode() for key, live in changed.items() if live]
        deleted = [key.decode() for key, live in changed.items() if not live]
        self.listener.on_changes(self.config.topic, upserted, deleted)

    def _report_skipped(self, skipped: list[tuple[int, int, bytes]]) -> None:
        self._skipped += len(skipped)
        for partition, offset, key in skipped[:_SKIPPED_LOGGED_PER_BATCH]:
            log.warning(
                "skipped the record at %s partition %d offset %d: its key %r is not UTF-8 "
                "(the topic contract's keys are UTF-8 entity ids)",
                self.config.topic,
                partition,
                offset,
                key,
            )

    def _track_sync(self, now: float) -> None:
        h = self._health
        if not h.connected:
            return
        positions = self.storage.state.positions
        if all(positions.get(p, 0) >= hi for p, hi in h.high.items()):
            h.in_sync_at = now
            # Record "in sync at this wall time" so a restart can tell a quiet topic from a
            # long absence (the delete.retention.ms check in plan.py).
            if now - self._last_mark > self.config.heartbeat_interval:
                self._last_mark = now
                self.storage.mark_in_sync(_now_ms())

    def _check_partitions(self, consumer: Consumer) -> None:
        """Pick up partitions added to the topic while running."""
        try:
            md = consumer.list_topics(self.config.topic, timeout=1.0)
        except KafkaException:
            return  # the broker is away; health already says so
        tmd = md.topics.get(self.config.topic)
        if tmd is None or tmd.error is not None:
            return
        positions = self.storage.state.positions
        known = set(self._health.high) | set(positions)
        new = sorted(set(tmd.partitions) - known)
        if new:
            log.warning("topic %s grew: following new partitions %s", self.config.topic, new)
            for p in new:
                self._health.high[p] = 0
            consumer.incremental_assign(
                [TopicPartition(self.config.topic, p, OFFSET_BEGINNING) for p in new]
            )
