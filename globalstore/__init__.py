"""globalstore: every application instance gets a complete, local, queryable RocksDB copy of a
compacted Kafka topic. See docs/store.md."""

from globalstore.codec import Entry
from globalstore.config import RocksDBOptions, StoreConfig
from globalstore.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnavailable,
    ConfigurationError,
    ConversionFailed,
    DamagedLayoutError,
    FatalError,
    GlobalStoreError,
    InvalidValue,
    OffsetsOutOfRange,
    RetriableError,
    StartTimeout,
    StorageError,
    StoreAlreadyStarted,
    StoreClosed,
    StoreFailed,
    StoreLocked,
    StoreNotReady,
    TopicNotCompacted,
    TopicNotFound,
    UnreadableStore,
)
from globalstore.listeners import StoreListener
from globalstore.readonly import ReadOnlyStore
from globalstore.store import GlobalStore, StoreStatus
from globalstore.switch import SwitchingStore
from globalstore.topic import end_offsets

__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "BrokerUnavailable",
    "ConfigurationError",
    "ConversionFailed",
    "DamagedLayoutError",
    "Entry",
    "FatalError",
    "GlobalStore",
    "GlobalStoreError",
    "InvalidValue",
    "OffsetsOutOfRange",
    "ReadOnlyStore",
    "RetriableError",
    "RocksDBOptions",
    "StartTimeout",
    "StorageError",
    "StoreAlreadyStarted",
    "StoreClosed",
    "StoreConfig",
    "StoreFailed",
    "StoreListener",
    "StoreLocked",
    "StoreNotReady",
    "StoreStatus",
    "SwitchingStore",
    "TopicNotCompacted",
    "TopicNotFound",
    "UnreadableStore",
    "end_offsets",
]
