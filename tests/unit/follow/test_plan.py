"""Restore planning is pure: what the store holds and what the topic holds in, a decision out."""

from __future__ import annotations

from pathlib import Path

from globalstore.config import StoreConfig
from globalstore.follow.plan import Plan, plan, rebuild_reason
from globalstore.follow.topic import Marks, TopicInfo
from globalstore.storage.meta import Meta

CONFIG = StoreConfig("orders", "h:1", Path("s"), bulk_restore_threshold=100)
INFO = TopicInfo((0, 1), "id-1", "compact", 60_000)
NOW = 1_000_000


def _meta(**fields: object) -> Meta:
    base: dict[str, object] = {
        "layout": 1,
        "topic": "orders",
        "topic_id": "id-1",
        "offsets": {0: 5, 1: 7},
        "count": 3,
        "in_sync_at_ms": NOW - 1_000,
    }
    return Meta(**{**base, **fields})  # type: ignore[arg-type]


MARKS = {0: Marks(0, 10, 10), 1: Marks(2, 9, 8)}


def test_a_store_within_the_topic_resumes_to_the_stable_end() -> None:
    assert rebuild_reason(_meta(), False, INFO, MARKS, CONFIG, NOW) is None
    # Partition 1 has an open transaction from offset 8: the end a restore can reach.
    assert plan(_meta(), INFO, MARKS, CONFIG) == Plan({0: 5, 1: 7}, {0: 10, 1: 8}, True)


def test_a_new_store_starts_at_each_low_mark_and_counts_in_bulk_when_large() -> None:
    new = Meta(layout=1, count=None)
    assert rebuild_reason(new, True, INFO, MARKS, CONFIG, NOW) is None
    assert plan(new, INFO, MARKS, CONFIG) == Plan({0: 0, 1: 2}, {0: 10, 1: 8}, False)


def _reason(meta: Meta, marks: dict[int, Marks] = MARKS, empty: bool = False) -> str:
    rebuild = rebuild_reason(meta, empty, INFO, marks, CONFIG, NOW)
    assert rebuild is not None
    return rebuild.reason


def test_each_reason_to_rebuild_is_named() -> None:
    assert "no layout" in _reason(Meta(layout=None))
    assert "unknown store layout version 9" in _reason(_meta(layout=9))
    assert "unknown store layout version 7" in _reason(_meta(migrate_from=7))
    assert "converted to value format 2" in _reason(_meta(value_format=2))
    assert "not 'orders'" in _reason(_meta(topic="payments"))
    assert "recreated" in _reason(_meta(topic_id="id-0"))
    assert "outside the topic's range [2, 9]" in _reason(_meta(offsets={0: 5, 1: 1}))
    assert "partition 4 no longer exists" in _reason(_meta(offsets={4: 1}))
    assert "delete.retention.ms" in _reason(_meta(in_sync_at_ms=NOW - 61_000))


def test_the_retention_clock_runs_from_the_last_time_the_store_held_the_end() -> None:
    # Batches applied since (applied_at) do not count; a store written before in_sync_at
    # existed falls back to applied_at.
    away = _meta(in_sync_at_ms=NOW - 61_000, applied_at_ms=NOW - 10)
    assert "delete.retention.ms" in _reason(away)
    legacy = _meta(in_sync_at_ms=None, applied_at_ms=NOW - 10)
    assert rebuild_reason(legacy, False, INFO, MARKS, CONFIG, NOW) is None
    unchecked = TopicInfo((0, 1), "id-1", None, None, configs_checked=False)
    assert rebuild_reason(away, False, unchecked, MARKS, CONFIG, NOW) is None
