"""What a following store thread does between batches, a bounded step at a time so that no
batch waits long: note whether it holds the topic's end, the recount after a bulk restore,
an eager migration, indexes new to the stored values (one job after the other), and beside
them the purge of expired keys."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from globalstore.config import StoreConfig
from globalstore.follow.health import Health
from globalstore.follow.prepare import Prepared
from globalstore.listeners import StoreListener
from globalstore.shaping import history, ttl
from globalstore.storage import Storage

__all__ = ["Chores"]

log = logging.getLogger(__name__)


class Chores:
    """The jobs queued once the store is ready, and the purge. `on_applied` wakes those
    waiting on the store's data; `on_purged` publishes the count of keys purged."""

    def __init__(
        self,
        config: StoreConfig,
        storage: Storage,
        listener: StoreListener,
        list_keys: bool,
        on_applied: Callable[[], None],
        on_purged: Callable[[], None],
    ) -> None:
        self.config, self.storage, self.listener = config, storage, listener
        self.list_keys, self.on_applied, self.on_purged = (
            list_keys, on_applied, on_purged
        )  # fmt: skip
        self.jobs: list[Callable[[], bool]] = []  # each step True once its job is done
        self.purge: ttl.Purge | None = None
        self.prune: history.Prune | None = None
        self._marked = time.monotonic()  # when "in sync" was last written to the store

    def queue(self, prepared: Prepared, recount: bool) -> None:
        """The jobs of a store just ready: the recount if asked (after a bulk restore: from
        here on every apply is exact and adds its change to it), the pass that counts the
        undecodable values a bulk restore stored unchecked, then the eager migration and the
        indexes new to the stored values, if pending."""
        self.purge, self.prune, self._marked = prepared.purge, prepared.prune, time.monotonic()
        if recount:
            # Counting 1M keys takes about a second: in chunks between follow batches.
            self.storage.begin_recount()
            self.jobs.append(self._recount_step)
        # Not only after this start's bulk restore: one that a crash or a stop cut short is
        # still due (the store says so until the pass ends).
        if self.storage.begin_undecodable_count():
            self.jobs.append(self._undecodable_step)
        jobs = (prepared.migration, prepared.indexing)
        self.jobs += [job.step for job in jobs if job is not None and job.pending]

    def step(self, now: float, health: Health) -> bool:
        """Note the sync, take a step of the job under way and one of the purge: whether
        there is more to do at once (the follower then takes records without waiting)."""
        # Record "in sync at this wall time" now and then, so a restart can tell a quiet
        # topic from a long absence (the delete.retention.ms check in plan.py).
        in_sync = health.track_sync(now, self.storage.state.positions)
        if in_sync and now - self._marked > self.config.heartbeat_interval:
            self._marked = now
            self.storage.mark_in_sync(int(time.time() * 1000))
        if self.jobs and self.jobs[0]():
            self.jobs.pop(0)
        # Beside the jobs, never after them: expired keys must not wait for a long migration
        # to leave the disk (each write keeps the purge right).
        purging = self._purge_step()
        pruning = self.prune is not None and (self.prune.step() > 0 or self.prune.busy)
        return bool(self.jobs) or purging or pruning

    def _purge_step(self) -> bool:
        """A step of the purge of expired keys (ttl.py), reported to the listeners as
        deletions; True while it has more to do at once."""
        purge = self.purge
        if purge is None:
            return False
        deleted = purge.step()
        if deleted:
            self.on_purged()
            self.on_applied()
            if self.list_keys:
                self.listener.on_changes(self.config.topic, [], [k.decode() for k in deleted])
        return purge.busy

    def _recount_step(self) -> bool:
        n = self.storage.recount_step(self.config.recount_chunk)
        if n is None:
            return False
        log.info("counted %d live keys in %s after a bulk restore", n, self.storage.path)
        self.on_applied()  # wakes count() callers waiting for the number
        return True

    def _undecodable_step(self) -> bool:
        n = self.storage.undecodable_step(self.config.recount_chunk)
        if n is None:
            return False
        log.info("counted %d undecodable values in %s after a bulk restore", n, self.storage.path)
        return True
