"""A copy of a store open for reads: its storage and its point lookup, which every face's
get() ends in (the query hot path)."""

from __future__ import annotations

from globalstore.shaping import ttl
from globalstore.storage import Storage

__all__ = ["Copy"]


class Copy:
    """A storage open for reads, and its point lookup (the query hot path)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._get = storage.reader()  # RocksDB's own get, valid until the storage closes

    def lookup(self, key: bytes) -> bytes | None:
        """The stored value of `key`; None if absent or expired under the stored ttl (read at
        each call: a writer's restart may change it under a SharedStore)."""
        raw = self._get(key)
        ttl_ms = self.storage.state.ttl_ms
        return raw if ttl_ms is None else ttl.visible(raw, ttl_ms)

    def close(self) -> None:
        """Close the storage and release its directory lock."""
        self.storage.close()
