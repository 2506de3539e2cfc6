"""GlobalStore: a store whose follower runs in this process (stores/in_process.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from globalstore.config import StoreConfig, StoreSettings
from globalstore.listeners import StoreListener
from globalstore.stores.in_process import InProcessSource
from globalstore.stores.store import Store

__all__ = ["GlobalStore"]


class GlobalStore(Store):
    """A complete local RocksDB copy of one compacted topic, kept current in the background.

    >>> with GlobalStore(topic="orders.current", bootstrap_servers="127.0.0.1:9092",
    ...                  path="state/orders.current") as store:   # doctest: +SKIP
    ...     store["order-17"]
    """

    def __init__(
        self,
        topic: str | None = None,
        bootstrap_servers: str | None = None,
        path: str | Path | None = None,
        kafka_config: Mapping[str, Any] | None = None,
        *,
        config: StoreConfig | None = None,
        listeners: Sequence[StoreListener] = (),
        bootstrap_from: str | Path | None = None,
        **settings: Unpack[StoreSettings],
    ) -> None:
        """Settings are StoreConfig's fields, passed by name (None means its default), or a
        whole `config`, which named settings then override. `bootstrap_from` is a peer's
        snapshot (URL of GET /v1/snapshot, or a snapshot directory) to start from when the
        store directory is empty (here) or must be rebuilt (the store thread)."""
        config = _store_config(topic, bootstrap_servers, path, kafka_config, config, settings)
        self.config = config
        super().__init__(InProcessSource(config, listeners, bootstrap_from))

    @classmethod
    def from_config(
        cls,
        config: StoreConfig,
        *,
        listeners: Sequence[StoreListener] = (),
        bootstrap_from: str | Path | None = None,
    ) -> GlobalStore:
        """A store with every setting of `config`: GlobalStore(config=config, ...)."""
        return cls(config=config, listeners=listeners, bootstrap_from=bootstrap_from)


def _store_config(
    topic: str | None,
    bootstrap_servers: str | None,
    path: str | Path | None,
    kafka_config: Mapping[str, Any] | None,
    config: StoreConfig | None,
    settings: Mapping[str, Any],
) -> StoreConfig:
    """The StoreConfig GlobalStore's arguments describe: `config` (if any) with the named
    settings over it; None means a setting's default."""
    given: dict[str, Any] = {
        "topic": topic,
        "bootstrap_servers": bootstrap_servers,
        "path": path,
        "kafka_config": kafka_config,
        **settings,
    }
    named = {name: value for name, value in given.items() if value is not None}
    if config is None:
        return StoreConfig(**named)  # TypeError names a missing or unknown setting
    return dataclasses.replace(config, **named) if named else config
