"""The secondary indexes of a store (indexes.py says what they hold): their stored
definitions, the functions each batch indexes its keys with, the entries a batch's keys get
and the chunks of the background build. Their entries live in the index column family
(index_family.py); Storage (database.py) calls `into` from its write path.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import rocksdict

from globalstore.shaping.indexes import Indexer, reconcile
from globalstore.storage.host import IndexHost
from globalstore.storage.meta import K_INDEX_NEXT_ID, IndexDef, index_key

log = logging.getLogger(__name__)


class SecondaryIndexes:
    """A Storage's secondary indexes (indexes.Building for the store thread's build)."""

    def __init__(self, host: IndexHost) -> None:
        self._s = host
        # The store's index functions (indexes.py), set before the first apply when it has
        # indexes: every batch then indexes the keys it writes.
        self.indexer: Indexer | None = None

    @property
    def defs(self) -> Mapping[str, IndexDef]:
        return self._s.state.indexes

    def keys_from(self, start: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, raw value) pairs from `start` on: the build's next chunk."""
        return self._s.keys_from(start, limit)

    def define(self, wanted: Mapping[str, int]) -> None:
        """Make the stored index definitions those of `wanted` ({name: version}), in one
        batch: a new index (or version) gets a new id, built at once if the store holds no
        key; the entries of a removed (or replaced) one are deleted with range deletions."""
        s = self._s
        meta = s.read_meta()
        plan = reconcile(meta.indexes, meta.index_next_id, wanted, s.is_empty())
        if not plan.written and not plan.dropped:
            return
        family = s.index_family()
        wb = rocksdict.WriteBatch(raw_mode=True)
        for name, old in plan.dropped.items():
            family.drop_into(wb, old.id)
            wb.delete(index_key(name), s.meta_handle)
            log.info("store %s: dropped index %r (version %d)", s.path, name, old.version)
        for name, new in plan.written.items():
            wb.put(index_key(name), new.to_bytes(), s.meta_handle)
            log.info(
                "store %s: index %r version %d %s", s.path, name, new.version,
                "defined" if new.built else "defined; building it from the stored values",
            )  # fmt: skip
        wb.put(K_INDEX_NEXT_ID, b"%d" % plan.next_id, s.meta_handle)
        s.write(wb)
        entries = {n: s.state.index_entries.get(n, 0) for n in plan.indexes}
        entries.update(dict.fromkeys(plan.written, 0))
        s.state = dataclasses.replace(s.state, indexes=plan.indexes, index_entries=entries)

    def build_chunk(self, name: str, new: IndexDef, staged: Mapping[bytes, bytes | None]) -> None:
        """Index the `staged` keys (a chunk of stored values) in index `name`, and record its
        definition `new` (its cursor past the chunk), in one batch: a crash resumes there."""
        s = self._s
        wb = rocksdict.WriteBatch(raw_mode=True)
        entries = self.into(wb, staged, {name: new})
        wb.put(index_key(name), new.to_bytes(), s.meta_handle)
        s.write(wb)
        indexes = {**s.state.indexes, name: new}
        s.state = dataclasses.replace(
            s.state, indexes=indexes, index_entries=entries or s.state.index_entries
        )

    # -- the write path ----------------------------------------------------------------------

    def into(
        self,
        wb: rocksdict.WriteBatch,
        staged: Mapping[bytes, bytes | None],
        defs: Mapping[str, IndexDef],
    ) -> dict[str, int] | None:
        """Put in `wb` the index changes of the `staged` keys and the indexes' new entry
        counts; returns the new counts (None: nothing changed)."""
        index = self._s.index
        if self.indexer is None or index is None or not defs:
            return None
        return index.index_into(wb, self.indexer, staged, defs, self._s.state.index_entries)
