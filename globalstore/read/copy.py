"""A copy of a store open for reads: its storage, its point lookup, which every face's get()
ends in (the query hot path), and how its values are read (a switch moves a store to a copy
of another topic, in another value format)."""

from __future__ import annotations

from globalstore import codec
from globalstore.config import ValueCache
from globalstore.converters import ValueFormats, decoder
from globalstore.shaping import ttl
from globalstore.storage import Storage
from globalstore.storage.cache import HotValues

__all__ = ["Copy"]


class Copy:
    """A storage open for reads, its point lookup, and how its values decode."""

    def __init__(
        self,
        storage: Storage,
        formats: ValueFormats,
        topic: str,
        cache: ValueCache | None = None,
    ) -> None:
        """`formats`: the format queries answer in and the converters that lead to it;
        `cache`: keep the decoded values of hot keys, as that setting says."""
        self.storage = storage
        self.topic = topic
        # codec.decode, or one that converts older value formats (converters.decoder).
        self.decode: codec.Decode = decoder(formats)
        # The value format queries answer in: stored JSON of this format needs no conversion.
        self.value_format = formats.current
        self._get = storage.point_get()  # RocksDB's own get, valid until the storage closes
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

    def close(self) -> None:
        """Close the storage and release its directory lock."""
        self.storage.close()
