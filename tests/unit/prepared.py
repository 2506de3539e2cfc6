"""A storage made and prepared as a store thread makes and prepares one (replicas/opening.py,
follow/prepare.py), without a broker: opened with its config's write rules, initialised if
new, its meta loaded, its rules defined."""

from __future__ import annotations

import time
from collections.abc import Mapping

from globalstore.config import StoreConfig
from globalstore.shaping.rules import write_rules
from globalstore.storage import Storage

__all__ = ["prepared"]


def prepared(
    config: StoreConfig, *, bulk: bool = False, meta: Mapping[bytes, bytes] | None = None
) -> Storage:
    """The storage at config.path with the rules of `config`, defined (`bulk`: as for a bulk
    restore); a new one is initialised with the `meta` entries given."""
    storage = Storage(config.path, config.rocksdb, rules=write_rules(config))
    if storage.read_meta().layout is None:
        storage.initialise(config.topic, None, 1, dict(meta or {}))
    storage.load(storage.read_meta())
    storage.define(bulk=bulk, now_ms=int(time.time() * 1000))
    return storage
