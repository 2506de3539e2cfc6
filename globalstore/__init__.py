"""globalstore: every application instance gets a complete, local, queryable RocksDB copy of a
compacted Kafka topic. See docs/store.md."""

from globalstore.codec import Entry
from globalstore.config import RocksDBOptions, StoreConfig
from globalstore.errors import (
    BrokerUnavailable,
    ConfigurationError,
    FatalError,
    GlobalStoreError,
    InvalidValue,
    OffsetsOutOfRange,
    RetriableError,
    StartTimeout,
    StorageError,
    StoreClosed,
    StoreLocked,
    StoreNotReady,
    TopicNotCompacted,
    TopicNotFound,
)
from globalstore.listeners import RestoreListener
from globalstore.store import GlobalStore, StoreStatus

__all__ = [
    "BrokerUnavailable",
    "ConfigurationError",
    "Entry",
    "FatalError",
    "GlobalStore",
    "GlobalStoreError",
    "InvalidValue",
    "OffsetsOutOfRange",
    "RestoreListener",
    "RetriableError",
    "RocksDBOptions",
    "StartTimeout",
    "StorageError",
    "StoreClosed",
    "StoreConfig",
    "StoreLocked",
    "StoreNotReady",
    "StoreStatus",
    "TopicNotCompacted",
    "TopicNotFound",
]
