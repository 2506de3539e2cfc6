"""The secondary indexes of a store (shaping/indexes.py says what they hold): their stored
definitions and how a config changes them, the entries a batch's keys get and the chunks of
the background build. Their entries live in the index column family (index_family.py, their
keys in keys.py); Storage (database.py) calls `into` from its write path.

A bulk restore into a store that was empty when it began looks up no old entries of a key it
has not written yet (written.py): such a key has none (an empty store holds no entry of an
index it defines; a dropped index's entries are under another id). A key written in an
earlier batch of the restore is looked up, so its old entries go. Half of an indexed cold
restore's RocksDB work was those lookups, all misses (docs/performance.md, "Declared
indexes").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from globalstore.storage.batch import Batch
from globalstore.storage.host import IndexHost
from globalstore.storage.keys import KeyIndexValues
from globalstore.storage.meta import K_INDEX_NEXT_ID, IndexDef, index_key
from globalstore.storage.written import WrittenKeys

__all__ = ["Definitions", "IndexValues", "SecondaryIndexes", "reconcile"]

log = logging.getLogger(__name__)


class IndexValues(Protocol):
    """A store's index functions (shaping/indexes.Indexer), as a batch sees them."""

    @property
    def failures(self) -> Mapping[str, int]:
        """Keys each index's function failed on since this start, for status()."""

    def values(
        self,
        staged: Mapping[bytes, bytes | None],
        defs: Mapping[str, IndexDef],
        before: bool = False,
    ) -> dict[str, list[KeyIndexValues]]:
        """{index name: the index values of each key of `staged` ({key: stored bytes, None
        if deleted}) after the batch, in its order}, for the indexes of `defs` it has a
        function for; `before`: the keys' values before the batch, their failures counted
        when they were written."""


@dataclass(frozen=True)
class Definitions:
    """What the meta column family must say after reconciling a store with its config."""

    indexes: dict[str, IndexDef]  # every index the config names
    written: dict[str, IndexDef]  # those new or replaced: their meta entries to write
    dropped: dict[str, IndexDef]  # stored ones removed or replaced: their entries to delete
    next_id: int
    # Kept ones whose declared path is recorded anew (an older store recorded none): their
    # meta entries to write, their entries kept.
    redeclared: dict[str, IndexDef] = field(default_factory=dict)


def reconcile(
    stored: Mapping[str, IndexDef],
    next_id: int,
    wanted: Mapping[str, int],
    empty: bool,
    paths: Mapping[str, str] | None = None,
) -> Definitions:
    """The definitions for indexes {name: version} over a store holding `stored`, those
    declared by a path recording it (`paths`: {name: path}). A new index, or one whose
    version changed, gets a new id; it is built at once in an `empty` store (every write
    indexes what it writes), else it is built from the stored values."""
    paths = paths or {}
    indexes: dict[str, IndexDef] = {}
    written: dict[str, IndexDef] = {}
    redeclared: dict[str, IndexDef] = {}
    dropped = {n: d for n, d in stored.items() if wanted.get(n) != d.version}
    for name, version in wanted.items():
        old, path = stored.get(name), paths.get(name)
        if old is not None and old.version == version:
            indexes[name] = old
            if old.path != path:
                indexes[name] = redeclared[name] = replace(old, path=path)
            continue
        new = IndexDef(next_id, version, built=empty, cursor=None if empty else b"", path=path)
        next_id += 1
        indexes[name] = written[name] = new
    return Definitions(indexes, written, dropped, next_id, redeclared)


class SecondaryIndexes:
    """A Storage's secondary indexes (shaping/indexes.IndexBuild drives their build)."""

    def __init__(self, host: IndexHost, indexer: IndexValues | None = None) -> None:
        self._s = host
        # The store's index functions (shaping/indexes.py), when it has indexes: every batch
        # indexes the keys it writes.
        self.indexer = indexer
        self._written = WrittenKeys(host.is_empty)

    def forget_written(self) -> None:
        """The store was wiped: whether it is empty is decided again at the next batch."""
        self._written.forget()

    @property
    def defs(self) -> Mapping[str, IndexDef]:
        """The store's index definitions by name, as its current state holds them."""
        return self._s.state.indexes

    def keys_from(self, start: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, raw value) pairs from `start` on: the build's next chunk."""
        return self._s.keys_from(start, limit)

    def define(self, wanted: Mapping[str, int], paths: Mapping[str, str] | None = None) -> None:
        """Make the stored index definitions those of `wanted` ({name: version}; `paths`:
        {name: path} of the declared ones), in one batch: a new index (or version) gets a
        new id, built at once if the store holds no key; the entries of a removed (or
        replaced) one are deleted with range deletions."""
        s = self._s
        meta = s.read_meta()
        plan = reconcile(meta.indexes, meta.index_next_id, wanted, s.is_empty(), paths)
        if not plan.written and not plan.dropped and not plan.redeclared:
            return
        family = s.index_family()
        batch = s.batch()
        for name, old in plan.dropped.items():
            family.drop_into(batch.wb, old.id)
            batch.put_meta(index_key(name), None)
            log.info("store %s: dropped index %r (version %d)", s.path, name, old.version)
        for name, new in plan.written.items():
            batch.put_meta(index_key(name), new.to_bytes())
            log.info(
                "store %s: index %r version %d %s", s.path, name, new.version,
                "defined" if new.built else "defined; building it from the stored values",
            )  # fmt: skip
        for name, kept in plan.redeclared.items():
            batch.put_meta(index_key(name), kept.to_bytes())
        batch.put_meta(K_INDEX_NEXT_ID, b"%d" % plan.next_id)
        entries = {n: batch.state.index_entries.get(n, 0) for n in plan.indexes}
        entries.update(dict.fromkeys(plan.written, 0))
        batch.change(indexes=plan.indexes, index_entries=entries)
        s.commit(batch)

    def build_chunk(self, name: str, new: IndexDef, staged: Mapping[bytes, bytes | None]) -> None:
        """Index the `staged` keys (a chunk of stored values) in index `name`, and record its
        definition `new` (its cursor past the chunk), in one batch: a crash resumes there."""
        batch = self._s.batch(data=False)
        self.into(batch, staged, {name: new}, olds={})  # no key it reaches has entries yet
        batch.put_meta(index_key(name), new.to_bytes())
        batch.change(indexes={**batch.state.indexes, name: new})
        self._s.commit(batch)

    # -- the write path ----------------------------------------------------------------------

    def into(
        self,
        batch: Batch,
        staged: Mapping[bytes, bytes | None],
        defs: Mapping[str, IndexDef],
        bulk: bool = False,
        olds: Mapping[bytes, bytes | None] | None = None,
    ) -> None:
        """Put in `batch` the changes the `staged` keys make to the indexes `defs` and their
        new entry counts. `bulk`: a batch of a bulk restore. `olds`: the keys' stored values
        before the batch, where the caller has them (a key not in it had none); else read
        here, for an index that finds its old entries from them."""
        index = self._s.index
        if self.indexer is None or index is None or not defs:
            return
        keys = list(staged)
        lookup = self._lookup(keys, bulk)
        news = self.indexer.values(staged, defs)
        fresh = {name: defs[name] for name in news if not defs[name].reverse}
        before = self._before(keys, lookup, fresh, news, olds, each=not bulk) if fresh else {}
        counts = batch.state.index_entries
        entries = index.index_into(
            batch.wb, keys, news, before, defs, counts, lookup, each=not bulk
        )
        if entries != counts:  # a batch of updates moving keys between values counts none
            batch.change(index_entries=entries)

    def _before(
        self,
        keys: list[bytes],
        lookup: list[int] | None,
        defs: Mapping[str, IndexDef],
        news: Mapping[str, list[KeyIndexValues]],
        olds: Mapping[bytes, bytes | None] | None,
        each: bool,
    ) -> dict[str, list[KeyIndexValues | None]]:
        """{index name: each key's values in it before the batch (None: none)}, for indexes
        keeping no reverse entries: the index values of the stored values then (`olds`, else
        read, of the keys at `lookup` only where given). A key an unbuilt index's build has
        not reached is given its new values as its old: no change, as the build indexes it
        with the value it finds there (shaping/indexes.IndexBuild)."""
        assert self.indexer is not None  # called by into() only
        at = range(len(keys)) if lookup is None else lookup
        wanted = [keys[i] for i in at]
        if olds is not None:
            raws = [olds.get(key) for key in wanted]
        else:
            raws = list(map(self._s.get, wanted)) if each else self._s.get_many(wanted)
        held = [(i, raw) for i, raw in zip(at, raws, strict=True) if raw is not None]
        stored = {keys[i]: raw for i, raw in held}
        values = self.indexer.values(stored, defs, before=True) if stored else {}
        out: dict[str, list[KeyIndexValues | None]] = {}
        for name, d in defs.items():
            before: list[KeyIndexValues | None] = [None] * len(keys)
            for (i, _), value in zip(held, values.get(name, []), strict=True):
                before[i] = value
            if not d.built and d.cursor is not None:
                new, cursor = news[name], d.cursor
                for i, key in enumerate(keys):
                    if key >= cursor:
                        before[i] = new[i]
            out[name] = before
        return out

    def _lookup(self, keys: list[bytes], bulk: bool) -> list[int] | None:
        """The positions of the `keys` that may have old entries (None: any key may), in a
        bulk restore into a store that was empty when it began: those written before in it."""
        written = self._written.filter(bulk)
        return None if written is None else written.seen_then_add(keys)
