"""A store's invalid_values setting (config.OnInvalidValue) carried out: every value is
checked as it is applied; with "quarantine" a record that does not decode is held apart
(storage/quarantine.py) instead of stored; with "store" it is stored as it came and its key
marked, so that the store knows how many such values it holds.

What a store was written with is kept in its meta (meta.K_INVALID_VALUES): a store written
with the one setting holds other values than the other would (a key whose last record did not
decode keeps its previous value instead of the bad one), so opening it with the other setting
rebuilds it, as a changed transform does.
"""

from __future__ import annotations

from globalstore.config import OnInvalidValue, StoreConfig
from globalstore.storage import Storage
from globalstore.storage.meta import I64, K_INVALID_HELD, K_INVALID_VALUES, Meta
from globalstore.storage.quarantine import Quarantine, checker, held, marked

__all__ = ["define", "meta_entries", "rebuild_reason"]


def define(storage: Storage, config: StoreConfig) -> None:
    """Before any record is applied: have every batch check its values, holding the keys
    the store's quarantine (or its marks) holds already. A store that stores them as they
    came and was written before they were counted (no count in its meta) checks nothing:
    the count would not be exact (a rebuild starts one). One whose count a bulk restore left
    to the pass after it checks every value from then on (storage/database.py)."""
    formats = config.value_formats()
    check, where = checker(formats, config.topic), str(storage.path)
    if config.invalid_values is OnInvalidValue.QUARANTINE:
        keys = [q.key.encode("utf-8") for q in held(storage.meta_items)]
        storage.quarantine = Quarantine(check, keys, formats.plain, where=where)
    elif storage.state.undecodable is None and not storage.state.undecodable_counting:
        storage.quarantine = None
    else:
        keys = list(marked(storage.meta_items))
        storage.quarantine = Quarantine(check, keys, formats.plain, withhold=False, where=where)


def meta_entries(config: StoreConfig) -> dict[bytes, bytes]:
    """The meta entries a new store of this config is initialised with: by default only the
    count of undecodable values, none yet (a store written before the setting existed reads
    the same, uncounted)."""
    if config.invalid_values is OnInvalidValue.STORE:
        return {K_INVALID_HELD: I64.pack(0)}
    return {K_INVALID_VALUES: config.invalid_values.value.encode("ascii")}


def rebuild_reason(meta: Meta, config: StoreConfig) -> str | None:
    """Why the values stored under `meta` are not what this config would store, or None."""
    stored = meta.invalid_values or OnInvalidValue.STORE.value
    wanted = config.invalid_values.value
    if stored == wanted:
        return None
    return f"store was written with invalid_values={stored!r}, not {wanted!r}"
