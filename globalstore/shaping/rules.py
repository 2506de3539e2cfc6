"""The write rules (storage/rules.py) a store's config declares: its indexes' definitions and
functions, the check its invalid_values setting puts each value through, its ttl and its
window of history."""

from __future__ import annotations

from globalstore.config import OnInvalidValue, StoreConfig
from globalstore.converters import decoder
from globalstore.shaping import history, ttl
from globalstore.shaping.indexes import Indexer
from globalstore.storage.quarantine import checker
from globalstore.storage.rules import ValueCheck, WriteRules

__all__ = ["write_rules"]


def write_rules(config: StoreConfig) -> WriteRules:
    """What every write of a store of `config` does beyond storing its records."""
    wanted = config.index_definitions()
    formats = config.value_formats()
    # Declared indexes are read in C from values of the current format, in a store that
    # has no converters (whose values a query returns as they are stored).
    fmt = formats.current if formats.plain else None
    indexer = Indexer(config.indexes, decoder(formats), config.topic, fmt) if wanted else None
    values = ValueCheck(
        checker(formats, config.topic),
        formats.plain,
        withhold=config.invalid_values is OnInvalidValue.QUARANTINE,
    )
    return WriteRules(
        indexes=wanted,
        index_paths={name: fn for name, fn in config.indexes.items() if isinstance(fn, str)},
        indexer=indexer,
        values=values,
        ttl_ms=ttl.to_ms(config.ttl),
        history_ms=history.to_ms(config.history),
    )
