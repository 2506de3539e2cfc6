"""What a read of a store's database uses: the live Storage (what the database holds now), or
a Pinned one (pinned.py: what it held at one instant, for a view of several reads). The read
side (read/) reads through this, so one query answers from either."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from globalstore.storage.state import StorageState

__all__ = ["Reads", "Versions"]


class Versions(Protocol):
    """The versions of a store with history (history.py), read as of a time."""

    def get(self, key: bytes, t_ms: int) -> bytes | None:
        """The stored bytes of `key` as of `t_ms` (None: absent then)."""

    def scan(
        self, lower: bytes | None, upper: bytes | None, t_ms: int
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, stored bytes) as of `t_ms` of the keys in [lower, upper) present then."""


class Reads(Protocol):
    """The reads queries make of a store's database."""

    @property
    def path(self) -> Path:
        """The store's directory."""

    @property
    def state(self) -> StorageState:
        """What the database holds, as of the instant these reads see."""

    @property
    def taken_ms(self) -> int | None:
        """The wall time (ms) of the instant these reads see; None: now, whenever asked. A
        ttl's expiry and the history's horizon are judged at it."""

    @property
    def history(self) -> Versions:
        """The versions kept for reads as of a time."""

    def get(self, key: bytes) -> bytes | None:
        """The raw value of `key`, None if absent."""

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of `keys` in their order (None where absent)."""

    def scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, raw value) with lower <= key < upper, over one point-in-time view."""

    def index_scan(
        self, lower: bytes, upper: bytes, reverse: bool
    ) -> Iterator[tuple[bytes, bytes, bytes]]:
        """(index value, key, raw value) of the index entries in [lower, upper)."""

    def index_count(self, lower: bytes, upper: bytes) -> int:
        """How many index entries lie in [lower, upper)."""

    def meta_items(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The meta column family's entries in key order from `start` on."""

    def live_count(self, cutoff_ms: int) -> int | None:
        """The stored count of live keys less those expired at `cutoff_ms` (with a ttl's
        time index); None while the count is unknown."""
