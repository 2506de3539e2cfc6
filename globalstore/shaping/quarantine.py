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
from globalstore.storage.meta import I64, K_INVALID_HELD, K_INVALID_VALUES, Meta

__all__ = ["meta_entries", "rebuild_reason"]


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
