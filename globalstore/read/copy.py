"""A copy of a store open for reads: its storage, its point lookup, which every face's get()
ends in (the query hot path), and how its values are read (a switch moves a store to a copy
of another topic, in another value format); and the same copy pinned at one instant, which
a view's reads answer from."""

from __future__ import annotations

from collections.abc import Mapping

from globalstore import codec
from globalstore.config import IndexFn, ValueCache
from globalstore.converters import ValueFormats, decoder
from globalstore.shaping import ttl
from globalstore.storage import Storage
from globalstore.storage.cache import HotValues
from globalstore.storage.pinned import Pinned
from globalstore.storage.reads import Reads

__all__ = ["Copy"]


class Copy:
    """A storage open for reads, its point lookup, and how its values decode."""

    def __init__(
        self,
        storage: Storage,
        formats: ValueFormats,
        topic: str,
        cache: ValueCache | None = None,
        index_fns: Mapping[str, IndexFn] | None = None,
    ) -> None:
        """`formats`: the format queries answer in and the converters that lead to it;
        `cache`: keep the decoded values of hot keys, as that setting says; `index_fns`: the
        store's function indexes, where this process has them (an index read as of a time
        calls them: read/index_as_of.py)."""
        self.storage = storage
        self.index_fns: Mapping[str, IndexFn] = index_fns or {}
        self.reads: Reads = storage  # what queries read: the database as it is now
        self.topic = topic
        # codec.decode, or one that converts older value formats (converters.decoder).
        self.decode: codec.Decode = decoder(formats)
        # The value format queries answer in: stored JSON of this format needs no conversion.
        self.value_format = formats.current
        self._get = storage.point_get()  # RocksDB's own get, taken again at each reopening
        storage.on_reopen(self._rebind)
        # get()'s cache, the storage's own: its writes drop what they replace (cache.py).
        self.hot: HotValues | None = (
            None if cache is None else storage.hot_values(cache.entries, cache.max_bytes)
        )

    def lookup(self, key: bytes) -> bytes | None:
        """The stored value of `key`; None if absent or expired under the stored ttl (read at
        each call: a writer's restart may change it under a SharedStore)."""
        raw = self._get(key)
        ttl_ms = self.storage.state.ttl_ms
        return raw if ttl_ms is None else ttl.visible(raw, ttl_ms)

    def _rebind(self) -> None:
        """Take the point get of the database the storage opened again (a wipe at start)."""
        self._get = self.storage.point_get()

    def pinned(self) -> Copy:
        """This copy as it is now, kept so for the reads of one view: its storage pinned
        (storage/pinned.py), no cache. Its close() lets the snapshots go, not the storage."""
        return _PinnedCopy(self, self.storage.pinned())

    def close(self) -> None:
        """Close the storage and release its directory lock."""
        self.storage.close()


class _PinnedCopy(Copy):
    """A copy pinned at one instant: its reads answer from its storage's snapshots, and a
    ttl's expiry is judged at that instant."""

    def __init__(self, live: Copy, pinned: Pinned) -> None:
        # Not Copy's own __init__: that one reads the live storage, and keeps a cache.
        self.storage = live.storage  # what it is a copy of; its reads go to `pinned`
        self.reads = self._pinned = pinned
        self.topic, self.decode, self.value_format = live.topic, live.decode, live.value_format
        self.index_fns = live.index_fns
        self._get = pinned.get
        self.hot = None

    def lookup(self, key: bytes) -> bytes | None:
        """The stored value of `key` then; None if absent or expired then."""
        raw = self._get(key)
        ttl_ms = self._pinned.state.ttl_ms
        if raw is None or ttl_ms is None:
            return raw
        return None if ttl.is_expired(raw, ttl.cutoff(ttl_ms, self._pinned.taken_ms)) else raw

    def close(self) -> None:
        """Let the snapshots go."""
        self._pinned.close()
