"""GlobalStore: a store that restores and follows its topic; where its follower runs is a
setting: a thread of this process (stores/in_process.py, the default) or a writer process of
its own, which this process reads as a RocksDB secondary (stores/secondary.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Unpack

from globalstore.config import StoreConfig, StoreSettings, check_setting_names
from globalstore.errors import ConfigurationError
from globalstore.listeners import StoreListener
from globalstore.read.source import StoreSource
from globalstore.stores.in_process import InProcessSource
from globalstore.stores.secondary import with_writer_process
from globalstore.stores.store import Store

__all__ = ["Follower", "GlobalStore"]

Follower = Literal["thread", "process"]  # where a GlobalStore's follower runs


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
        follower: Follower = "thread",
        **settings: Unpack[StoreSettings],
    ) -> None:
        """Settings are StoreConfig's fields, passed by name (None means its default), or a
        whole `config`, which named settings then override. `bootstrap_from` is a peer's
        snapshot (URL of GET /v1/snapshot, or a snapshot directory) to start from when the
        store directory is empty (here) or must be rebuilt (the store thread).

        follower="process" runs the follower in a writer process the store starts on start(),
        starts again if it dies and stops on close(): it then keeps up with the topic however
        busy this process's threads keep the GIL. Its functions (transform, indexes,
        converters) must be module-level functions that process can import; listeners and
        bootstrap_from cannot cross to it (ConfigurationError)."""
        check_setting_names(type(self).__name__, settings)
        config = _store_config(topic, bootstrap_servers, path, kafka_config, config, settings)
        self.config = config
        super().__init__(_source(config, follower, listeners, bootstrap_from))

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


def _source(
    config: StoreConfig,
    follower: Follower,
    listeners: Sequence[StoreListener],
    bootstrap_from: str | Path | None,
) -> StoreSource:
    """The source a GlobalStore with `follower` reads."""
    if follower == "thread":
        return InProcessSource(config, listeners, bootstrap_from)
    if follower != "process":
        raise ConfigurationError(f"follower must be 'thread' or 'process', not {follower!r}")
    if listeners or bootstrap_from is not None:
        raise ConfigurationError(
            "a store whose follower is a process takes no listeners and no bootstrap_from: "
            "they would have to run in that process"
        )
    return with_writer_process(config)


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
