"""WriteRules: what every write of a store does beyond storing its records, as the store's
config declares it (shaping/rules.py makes them of a StoreConfig).

A Storage is given its rules when it is made (database.py), so its constructor says what a
write does: which index values a batch reads, which check each value goes through, whether a
time index and versions are kept. What the rules ask of the files, the storage does in
define(), once their content is settled (after a rebuild's wipe or a snapshot's install) and
before any record is applied: the index definitions, the ttl and the window of history are
written into its meta, and the keys its quarantine holds are read from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from globalstore.storage.index_defs import IndexValues
from globalstore.storage.quarantine import Check

__all__ = ["ValueCheck", "WriteRules"]


@dataclass(frozen=True)
class ValueCheck:
    """The check each value goes through as it is applied (quarantine.py)."""

    check: Check
    # The store reads the library's own value format and has no converters: the C loop may
    # take a value it finds certainly JSON past the check.
    plain: bool
    # Hold a value that does not decode apart (keeping the key's previous value), else
    # store it as it came and mark its key.
    withhold: bool


@dataclass(frozen=True)
class WriteRules:
    """What a store's writes do beyond storing records; the default: nothing more."""

    indexes: Mapping[str, int] = field(default_factory=dict)  # {name: version} to keep
    index_paths: Mapping[str, str] = field(default_factory=dict)  # {name: path}: declared ones
    indexer: IndexValues | None = None  # reads the index values of a batch's records
    values: ValueCheck | None = None  # None: values are stored unchecked
    ttl_ms: int | None = None  # a time index is kept for it
    history_ms: int | None = None  # how long the versions of a key are kept
