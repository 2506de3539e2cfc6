"""HotValues: the decoded values of a store's hot keys, which get() answers from without a
RocksDB lookup or a decode (read/copy.py), emptied of what each write replaces inside that
write (Storage.commit), before the state that shows the write is published: a cached value
is never older than the store (contract 11).

A generation number orders reads and writes. A write makes it odd and drops the keys it
writes before RocksDB holds their new values, and makes it even again once they are
written. A reader notes the generation before its RocksDB get and keeps what it decoded
only if the generation is still that one, and even: no write began since its get, so
nothing it read can have been replaced meanwhile. A write that cannot name its keys (a bulk
restore, a secondary instance's catch-up, a wipe) empties the whole cache.

The values kept are the objects get() returns, shared by every caller that asks for the key:
a caller must not change them (the setting says so, config.ValueCache).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from globalstore.codec import record_timestamp

__all__ = ["NOT_KEPT", "HotValues"]

NOT_KEPT: Any = object()  # what value() answers for a key it does not hold


class HotValues:
    """Decoded values by key, at most `entries` of them and `max_bytes` of stored bytes; the
    oldest kept goes first."""

    def __init__(self, entries: int, max_bytes: int) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self.bytes = 0  # stored bytes of the values kept
        # key -> (decoded value, record timestamp or None, stored size)
        self._kept: OrderedDict[bytes, tuple[Any, int | None, int]] = OrderedDict()
        self._find = self._kept.get
        # Odd while a write is under way; read without the lock (one int, replaced whole).
        self.generation = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def value(self, key: bytes, ttl_ms: int | None) -> Any:
        """The value kept for `key`, or NOT_KEPT (also once it is past `ttl_ms`, so that the
        lookup hides it as it hides any expired value)."""
        kept = self._find(key)
        if kept is None:
            return NOT_KEPT
        if ttl_ms is not None:
            ts = kept[1]
            if ts is not None and ts < int(time.time() * 1000) - ttl_ms:
                return NOT_KEPT
        return kept[0]

    def keep(self, key: bytes, seen: int, value: Any, raw: bytes) -> None:
        """Keep `value`, decoded from `raw`, which a get read after noting generation `seen`;
        unless a write began since (then `raw` may be what it replaced)."""
        size = len(raw)
        if seen & 1 or size > self.max_bytes or self.entries <= 0:
            return
        kept = self._kept
        with self._lock:
            if self.generation != seen:
                return
            old = kept.pop(key, None)
            if old is not None:
                self.bytes -= old[2]
            while kept and (len(kept) >= self.entries or self.bytes + size > self.max_bytes):
                self.bytes -= kept.popitem(last=False)[1][2]
            kept[key] = (value, record_timestamp(raw), size)
            self.bytes += size

    def writing(self, keys: Iterable[bytes] | None) -> None:
        """A write of `keys` (None: keys it cannot name) begins: drop them (None: all)."""
        kept = self._kept
        with self._lock:
            self.generation += 1
            if keys is None:
                kept.clear()
                self.bytes = 0
                return
            for key in keys:
                old = kept.pop(key, None)
                if old is not None:
                    self.bytes -= old[2]

    def written(self) -> None:
        """The write that writing() began is in RocksDB (or failed): gets may keep again."""
        with self._lock:
            self.generation += 1
