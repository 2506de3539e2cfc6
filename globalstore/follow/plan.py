"""Restore planning: from what the store holds and what the topic holds now, decide where each
partition starts and which end offsets mean ready (contract 4), or why the store must be
rebuilt from the beginning.

Pure: it reads nothing and writes nothing. The preparation (prepare.py) performs a rebuild
(wipe, then plan again); the store thread applies the records with its one poll loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from globalstore.config import StoreConfig
from globalstore.follow.topic import Marks, TopicInfo, records_between
from globalstore.shaping import history, migrate, quarantine, transform
from globalstore.storage.meta import Meta

__all__ = ["Plan", "Rebuild", "plan", "rebuild_reason"]


@dataclass(frozen=True)
class Plan:
    """Where each partition starts, the end offsets that mean ready, and how to count keys."""

    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    exact_count: bool

    @property
    def records_to_restore(self) -> int:
        """Offsets between the start and the end offsets: the most records the restore reads (fewer
        on a compacted topic)."""
        return records_between(self.start_offsets, self.end_offsets)


@dataclass(frozen=True)
class Rebuild:
    """The store cannot resume: wipe it and restore from the beginning, for this reason."""

    reason: str


def plan(
    meta: Meta,
    info: TopicInfo,
    marks: Mapping[int, Marks],
    config: StoreConfig,
) -> Plan:
    """Resume from the stored offsets (a new store starts at each partition's low mark).
    Call rebuild_reason() first: this assumes the store may resume."""
    start = {p: meta.offsets.get(p, marks[p].low) for p in info.partitions}
    # The last stable offset: a transaction left open must not hold the restore back.
    end = {p: max(start[p], marks[p].stable) for p in info.partitions}
    exact = meta.count is not None and records_between(start, end) <= config.bulk_restore_threshold
    return Plan(start, end, exact)


def rebuild_reason(
    meta: Meta,
    store_is_empty: bool,
    info: TopicInfo,
    marks: Mapping[int, Marks],
    config: StoreConfig,
    now_ms: int | None = None,
) -> Rebuild | None:
    """Why resuming could leave the store different from the topic, or None if it may resume."""
    reason = _reason(meta, store_is_empty, info, marks, config, now_ms)
    return None if reason is None else Rebuild(reason)


def _reason(
    meta: Meta,
    store_is_empty: bool,
    info: TopicInfo,
    marks: Mapping[int, Marks],
    config: StoreConfig,
    now_ms: int | None,
) -> str | None:
    if meta.layout is None:
        return None if store_is_empty else "store has data but no layout version"
    unreadable = migrate.unreadable_reason(meta, config.value_formats())
    if unreadable is not None:
        return unreadable
    shaped = (
        transform.rebuild_reason(meta, config)
        or quarantine.rebuild_reason(meta, config)
        or history.rebuild_reason(meta, config)
    )
    if shaped is not None:
        return shaped
    if meta.topic is not None and meta.topic != config.topic:
        return f"store holds topic {meta.topic!r}, not {config.topic!r}"
    if meta.topic_id and info.topic_id and meta.topic_id != info.topic_id:
        return f"topic was recreated (id {meta.topic_id} is now {info.topic_id})"
    for p, offset in meta.offsets.items():
        if p not in marks:
            return f"stored partition {p} no longer exists in the topic"
        low, high = marks[p].low, marks[p].high
        if not low <= offset <= high:
            return (
                f"stored offset {offset} of partition {p} is outside the topic's range "
                f"[{low}, {high}] (topic recreated or records deleted)"
            )
    return _absence_reason(meta, info, now_ms)


def _absence_reason(meta: Meta, info: TopicInfo, now_ms: int | None) -> str | None:
    """A store away from the topic's end longer than delete.retention.ms may have missed
    tombstones the cleaner has since removed: resuming would keep deleted keys forever. Away
    means since it last held the end: batches of a catch-up that never got there (and may
    have crashed) do not reset the clock. Stores written before in_sync_at existed fall back
    to the time of their last batch."""
    since = meta.applied_at_ms if meta.in_sync_at_ms is None else meta.in_sync_at_ms
    if not meta.offsets or since is None or info.delete_retention_ms is None:
        return None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    away_ms = now - since
    if away_ms <= info.delete_retention_ms:
        return None
    return (
        f"store last held the topic's end {away_ms / 1000:.1f}s ago, longer than its "
        f"delete.retention.ms ({info.delete_retention_ms} ms): tombstones may be gone"
    )
