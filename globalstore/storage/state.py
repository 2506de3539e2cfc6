"""StorageState: what a store holds as of one applied batch, replaced whole and never changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class StorageState:
    """What the store holds, as of one applied batch: replaced whole, never changed, so a
    reader on another thread sees one instant without a lock."""

    positions: Mapping[int, int] = field(default_factory=dict)  # next offset per partition
    count: int | None = None  # live keys; None while a bulk restore is not recounted
    layout: int | None = None
    migrate_from: int | None = None  # older layout some values may still be in
    restored_at_ms: int | None = None  # of the last completed restore

    def __post_init__(self) -> None:
        # Read-only for whoever is handed the positions (listeners among them).
        object.__setattr__(self, "positions", MappingProxyType(dict(self.positions)))
