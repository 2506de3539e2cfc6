"""SharedStore: a store read in a process that does not write it, beside the one that does
(stores/secondary.py); with_writer() gives it a writer process of its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Unpack

from globalstore import codec
from globalstore.config import (
    IndexFn,
    RocksDBOptions,
    StoreSettings,
    ValueCache,
    check_setting_names,
    function_indexes,
)
from globalstore.converters import ValueFormats
from globalstore.stores.secondary import SecondarySource
from globalstore.stores.store import Store
from globalstore.stores.topic_changes import ReaderFeeds
from globalstore.stores.writer_process import WriterProcess, writer_spec

__all__ = ["SharedStore"]


class SharedStore(Store):
    """The query API over a store directory another process writes, kept current as that
    writer applies batches. Call start(); queries answer once the writer's copy is open."""

    def __init__(
        self,
        path: str | Path,
        rocksdb: RocksDBOptions | None = None,
        *,
        value_format: int = codec.VALUE_FORMAT_VERSION,
        converters: Mapping[int, Callable[[Any], Any]] | None = None,
        max_staleness: float | None = None,
        bootstrap_servers: str | None = None,
        kafka_config: Mapping[str, Any] | None = None,
        writer: WriterProcess | None = None,
        value_cache: ValueCache | None = None,
        indexes: Mapping[str, IndexFn | str] | None = None,
    ) -> None:
        """value_format and converters as for GlobalStore: the format queries answer in;
        max_staleness as for GlobalStore, of what this reader shows; bootstrap_servers and
        kafka_config as for GlobalStore, for changes() alone (it reads the topic); `writer`
        is a writer process of this store's own (with_writer()); value_cache as for
        GlobalStore, emptied whenever this reader catches up with the writer; `indexes` the
        writer's, for the reads of its function indexes as of a time (a declared index is
        recorded in the store: every reader reads it so)."""
        path = Path(path)
        feeds = ReaderFeeds(path, bootstrap_servers, kafka_config or {})
        formats = ValueFormats(value_format, dict(converters or {}))
        self._reader = SecondarySource(
            path, rocksdb, formats, max_staleness, feeds, writer, value_cache,
            function_indexes(indexes or {}),
        )  # fmt: skip
        super().__init__(self._reader)

    @classmethod
    def with_writer(
        cls,
        topic: str,
        bootstrap_servers: str,
        path: str | Path,
        kafka_config: Mapping[str, Any] | None = None,
        **settings: Unpack[StoreSettings],
    ) -> SharedStore:
        """A SharedStore with a writer of its own: a process that restores and follows `topic`
        into `path` as GlobalStore(topic, bootstrap_servers, path, kafka_config, **settings)
        would. start() starts it, close() stops it; if it dies, another starts. The queries
        are GlobalStore's, and the store keeps up with the topic however busy this process's
        threads keep the GIL. Functions (transform, indexes, converters) must be module-level
        functions the writer process can import: ConfigurationError otherwise."""
        check_setting_names(f"{cls.__name__}.with_writer", settings)
        spec = writer_spec(topic, bootstrap_servers, path, kafka_config, settings)
        return cls(
            path,
            settings.get("rocksdb"),
            value_format=settings.get("value_format", codec.VALUE_FORMAT_VERSION),
            converters=settings.get("converters"),
            max_staleness=settings.get("max_staleness"),
            bootstrap_servers=bootstrap_servers,
            kafka_config=kafka_config,
            writer=WriterProcess(spec),
            value_cache=settings.get("value_cache"),
            indexes=settings.get("indexes"),
        )

    def writer_alive(self) -> bool:
        """True while the writer speaks: a note within the last few heartbeats, and it has
        not said it stopped."""
        return self._reader.writer_alive()
