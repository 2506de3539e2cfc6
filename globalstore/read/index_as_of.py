"""Reads of a secondary index as of a time: the keys whose value then the index maps to the
index values asked, each with that value.

An index holds the entries of the current values only, so the answer comes from the
versions: every key's value as of t (read/as_of.py: the version rule of storage/versions.py,
a ttl's expiry judged at t) is given to the index's own definition, through the code that
writes its entries (shaping/indexes.Indexer): a declared index reads the field its meta
definition records (so any reader of the store has it), a function index calls the
function the copy was given (copy.py: a store's own config, or a reader's `indexes`). The
entries the key would have had then are compared with the same bounds find() reads the
index with and put in the same order (index value, then key), so `after`, `reverse` and
`limit` behave as they do now.

The cost is that of a scan of the whole store as of t: every key's versions are read, and
each value present then is indexed (a declared index reads the stored JSON in C, a function
gets the decoded value); the matches are gathered and sorted before the first is returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from globalstore import codec
from globalstore.config import IndexFn
from globalstore.errors import HistoryUnavailable
from globalstore.read.as_of import scan
from globalstore.read.copy import Copy
from globalstore.shaping.indexes import Indexer
from globalstore.storage.keys import entry_key, split_entry
from globalstore.storage.meta import IndexDef

__all__ = ["index_scan_at"]

_CHUNK = 1_000  # keys indexed per call of the index's definition


def index_scan_at(
    copy: Copy,
    name: str,
    d: IndexDef,
    lower: bytes,
    upper: bytes,
    reverse: bool,
    t_ms: int,
) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(index value, key, stored bytes) as of `t_ms` of the entries of index `name` (defined
    as `d`) in [lower, upper) (storage/keys.py bounds), in the index's order or reversed.
    HistoryUnavailable, before anything is read, for a function index this process does not
    hold."""
    indexer = _indexer(copy, name, d)
    rows = scan(copy.reads, None, None, False, t_ms)  # the versions' iterator is made now
    return _sorted(_entries(rows, indexer, name, d, lower, upper), reverse)


def _indexer(copy: Copy, name: str, d: IndexDef) -> Indexer:
    """An Indexer of index `name` alone, reading values as `copy` decodes them (its own:
    a read's failures are not the writer's, which status() counts)."""
    how: IndexFn | str | None = d.path or copy.index_fns.get(name)
    if how is None:
        raise HistoryUnavailable(
            f"index {name!r} is a function this store was not given: it is read as of a time "
            f"where the store's config names it (GlobalStore, SharedStore.with_writer), or "
            f"declare the index by its field"
        )
    # A declared index reads stored JSON in C where the copy decodes with no converters,
    # as the writer does (shaping/rules.py).
    fmt = copy.value_format if copy.decode is codec.decode else None
    return Indexer({name: how}, copy.decode, copy.topic, fmt)


def _entries(
    rows: Iterator[tuple[bytes, bytes]],
    indexer: Indexer,
    name: str,
    d: IndexDef,
    lower: bytes,
    upper: bytes,
) -> Iterator[tuple[bytes, bytes]]:
    """(entry, stored bytes) of each entry in [lower, upper) the keys of `rows` have in the
    index, unordered."""
    defs = {name: d}
    while chunk := dict(itertools.islice(rows, _CHUNK)):
        values = indexer.values(chunk, defs)[name]
        for (key, raw), got in zip(chunk.items(), values, strict=True):
            for value in (got,) if isinstance(got, bytes) else got:
                entry = entry_key(d.id, value, key)
                if lower <= entry < upper:
                    yield entry, raw


def _sorted(
    found: Iterator[tuple[bytes, bytes]], reverse: bool
) -> Iterator[tuple[bytes, bytes, bytes]]:
    """The rows of `found` in the order of their entries (reversed), gathered when the first
    is asked for."""
    for entry, raw in sorted(found, reverse=reverse):
        value, key = split_entry(entry)
        yield value, key, raw
