"""A store's invalid_values setting (config.OnInvalidValue) carried out: with "quarantine",
every value is checked as it is applied and a record that does not decode is held apart
(storage/quarantine.py) instead of stored.

What a store was written with is kept in its meta (meta.K_INVALID_VALUES): a store written
with the one setting holds other values than the other would (a key whose last record did not
decode keeps its previous value instead of the bad one), so opening it with the other setting
rebuilds it, as a changed transform does.
"""

from __future__ import annotations

from globalstore.config import OnInvalidValue, StoreConfig
from globalstore.storage import Storage
from globalstore.storage.meta import K_INVALID_VALUES, Meta
from globalstore.storage.quarantine import Quarantine, checker, held

__all__ = ["define", "meta_entries", "rebuild_reason"]


def define(storage: Storage, config: StoreConfig) -> None:
    """Before any record is applied: have every batch check its values if the config
    quarantines, holding the keys the store's quarantine holds already."""
    if config.invalid_values is not OnInvalidValue.QUARANTINE:
        storage.quarantine = None
        return
    keys = [q.key.encode("utf-8") for q in held(storage.meta_items)]
    formats = config.value_formats()
    storage.quarantine = Quarantine(checker(formats, config.topic), keys, formats.plain)


def meta_entries(config: StoreConfig) -> dict[bytes, bytes]:
    """The meta entries a new store of this config is initialised with (none by default: a
    store written before the setting existed reads the same)."""
    if config.invalid_values is OnInvalidValue.STORE:
        return {}
    return {K_INVALID_VALUES: config.invalid_values.value.encode("ascii")}


def rebuild_reason(meta: Meta, config: StoreConfig) -> str | None:
    """Why the values stored under `meta` are not what this config would store, or None."""
    stored = meta.invalid_values or OnInvalidValue.STORE.value
    wanted = config.invalid_values.value
    if stored == wanted:
        return None
    return f"store was written with invalid_values={stored!r}, not {wanted!r}"
