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
    IndexNotReady,
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
    UnknownIndex,
    UnreadableStore,
)
from globalstore.follow.topic import end_offsets
from globalstore.listeners import StoreListener
from globalstore.read.protocols import (
    ArrowOptions,
    FollowingStore,
    ScanFilters,
    StoreReader,
    StoreStatus,
)
from globalstore.status import State
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.read_only_store import ReadOnlyStore
from globalstore.stores.shared_store import SharedStore
from globalstore.stores.switching_store import SwitchingStore

__all__ = [
    "ArrowOptions",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerUnavailable",
    "ConfigurationError",
    "ConversionFailed",
    "DamagedLayoutError",
    "Entry",
    "FatalError",
    "FollowingStore",
    "GlobalStore",
    "GlobalStoreError",
    "IndexNotReady",
    "InvalidValue",
    "OffsetsOutOfRange",
    "ReadOnlyStore",
    "RetriableError",
    "RocksDBOptions",
    "ScanFilters",
    "SharedStore",
    "StartTimeout",
    "State",
    "StorageError",
    "StoreAlreadyStarted",
    "StoreClosed",
    "StoreConfig",
    "StoreFailed",
    "StoreListener",
    "StoreLocked",
    "StoreNotReady",
    "StoreReader",
    "StoreStatus",
    "SwitchingStore",
    "TopicNotCompacted",
    "TopicNotFound",
    "UnknownIndex",
    "UnreadableStore",
    "end_offsets",
]
