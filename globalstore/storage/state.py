"""StorageState: what a store holds as of one write, replaced whole and never changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from globalstore.storage.meta import IndexDef, Meta

__all__ = ["StorageState"]


@dataclass(frozen=True)
class StorageState:
    """What the store holds, as of one applied batch: replaced whole, never changed, so a
    reader on another thread sees one instant without a lock."""

    positions: Mapping[int, int] = field(default_factory=dict)  # next offset per partition
    count: int | None = None  # live keys; None while a bulk restore is not recounted
    layout: int | None = None
    migrate_from: int | None = None  # older layout some values may still be in
    restored_at_ms: int | None = None  # of the last completed restore
    indexes: Mapping[str, IndexDef] = field(default_factory=dict)  # secondary indexes by name
    index_entries: Mapping[str, int] = field(default_factory=dict)  # entries each one holds
    # Time to live (shaping/ttl.py): ms, or None; whether the store keeps a time index, the
    # cursor of its build (None once built) and how many entries it holds.
    ttl_ms: int | None = None
    time_index: bool = False
    time_cursor: bytes | None = None
    time_entries: int = 0
    # History (history.py): the window in ms (None: no versions kept), the wall ms from
    # which the versions are complete, and the layout of the versions (None: the first).
    history_ms: int | None = None
    history_from_ms: int | None = None
    history_layout: int | None = None
    quarantined: int = 0  # keys the quarantine holds (quarantine.py)
    # Keys whose latest record did not decode: stored as they came, or quarantined (None:
    # not counted, a store written before the count existed, or being counted: see below).
    undecodable: int | None = None
    # A bulk restore stored values unchecked: they are marked and counted by a pass over the
    # values once the store is ready (Storage.begin_undecodable_count).
    undecodable_counting: bool = False

    @classmethod
    def of(cls, meta: Meta, index_entries: Mapping[str, int]) -> StorageState:
        """What `meta` says the store holds, its indexes holding `index_entries`; the time
        index apart (timeindex.TimeIndex.loaded adds it)."""
        return cls(
            dict(meta.offsets),
            meta.count,
            meta.layout,
            meta.migrate_from,
            meta.restored_at_ms,
            dict(meta.indexes),
            index_entries,
            quarantined=meta.quarantined,
            undecodable=meta.undecodable,
            undecodable_counting=meta.undecodable_counting,
        )

    def __post_init__(self) -> None:
        # Read-only for whoever is handed the positions (listeners among them).
        for name in ("positions", "indexes", "index_entries"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
