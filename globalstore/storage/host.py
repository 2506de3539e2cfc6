"""IndexHost: what the indexes a Storage holds (index_defs.py, timeindex.py) use of it.

They keep entries derived from the data, so they write through the Storage that holds them:
each write of theirs is a Batch it starts and commits (batch.py), which carries the state
they change; the Storage publishes it once the batch is written (contract 5). Naming that
here, rather than handing them the Storage, keeps its other members its own and lets the
indexes stand below database.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import rocksdict

from globalstore.storage.batch import Batch
from globalstore.storage.index_family import IndexFamily
from globalstore.storage.meta import Meta
from globalstore.storage.state import StorageState

__all__ = ["IndexHost"]


class IndexHost(Protocol):
    """The Storage holding an index, as the index sees it (database.py implements it)."""

    path: Path
    # Held while writing, and by a reader that must see two things at one instant.
    view_lock: threading.Lock

    @property
    def state(self) -> StorageState:
        """What the store holds as of its last write."""

    @property
    def index(self) -> IndexFamily | None:
        """The index column family, None while the store has none."""

    def index_family(self) -> IndexFamily:
        """The index column family, created if the store has none yet."""

    def batch(self, data: bool = True) -> Batch:
        """A new write, from the state the store holds now; data=False: of no data key."""

    def commit(self, batch: Batch) -> None:
        """Write `batch`, then publish its state."""

    def read_meta(self) -> Meta:
        """The meta column family, parsed; DamagedLayoutError if an entry does not parse."""

    def get_meta(self, key: bytes) -> bytes | None:
        """The raw value of one meta entry, None if absent."""

    def is_empty(self) -> bool:
        """Whether the store holds no data key (meta entries do not count)."""

    def get(self, key: bytes) -> bytes | None:
        """The raw value of `key`, None if absent."""

    def data_iterator(self) -> rocksdict.RdictIter:
        """An iterator over the data as it is now (a scan's: it fills no cache)."""

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Raw values of `keys` in their order (None where absent), read at one instant."""

    def keys_from(self, start: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, raw value) pairs in key order from `start` on (None: the first
        key)."""

    def index_count(self, lower: bytes, upper: bytes) -> int:
        """How many index entries lie in [lower, upper); 0 without an index column family."""
