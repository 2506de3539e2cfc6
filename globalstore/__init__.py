"""globalstore: every application instance gets a complete, local, queryable RocksDB copy of a
compacted Kafka topic. See docs/store.md."""

# The layout, one role per package, each floor importing only the floors below it (the
# `layers` contract in pyproject.toml holds this; docs/architecture.md draws it):
#   cli/ demo/ server/   the commands, the demo, HTTP   (localkafka/: the dev broker, apart)
#   aio                  the stores for asyncio: AsyncGlobalStore, AsyncSharedStore
#   stores/              the faces users construct: GlobalStore, SharedStore, ReadOnly, Switching
#   replicas/            the live copy and its swap, healing, announcements to reader processes
#   follow/ | read/      the write side (Kafka -> a WriteBatch a batch) | the shared queries
#   shaping/ | snapshots/  what user functions do to values | a store's copy as files or a stream
#   storage/             RocksDB and every on-disk byte layout; the one write path
#   config               frozen settings
#   codec converters kafka/ listeners status waiting errors: what every floor speaks
# The names imported below are the public API; everything else may change.

from globalstore.codec import Entry
from globalstore.config import RocksDBOptions, StoreConfig, StoreSettings, ValueCache
from globalstore.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnavailable,
    ConfigurationError,
    ConversionFailed,
    DamagedLayoutError,
    FatalError,
    GlobalStoreError,
    HistoryUnavailable,
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
from globalstore.read.changes import Change, ChangeFeed, Resync
from globalstore.read.protocols import (
    ArrowOptions,
    FollowingStore,
    ScanFilters,
    ScanOptions,
    StoreReader,
    StoreStatus,
    StoreView,
)
from globalstore.shaping.fields import Shape, field_index
from globalstore.status import State
from globalstore.storage.quarantine import Quarantined
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.read_only_store import ReadOnlyStore
from globalstore.stores.shared_store import SharedStore
from globalstore.stores.switching_store import SwitchingStore

__all__ = [
    "ArrowOptions",
    "AuthenticationError",
    "AuthorizationError",
    "BrokerUnavailable",
    "Change",
    "ChangeFeed",
    "ConfigurationError",
    "ConversionFailed",
    "DamagedLayoutError",
    "Entry",
    "FatalError",
    "FollowingStore",
    "GlobalStore",
    "GlobalStoreError",
    "HistoryUnavailable",
    "IndexNotReady",
    "InvalidValue",
    "OffsetsOutOfRange",
    "Quarantined",
    "ReadOnlyStore",
    "Resync",
    "RetriableError",
    "RocksDBOptions",
    "ScanFilters",
    "ScanOptions",
    "Shape",
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
    "StoreSettings",
    "StoreStatus",
    "StoreView",
    "SwitchingStore",
    "TopicNotCompacted",
    "TopicNotFound",
    "UnknownIndex",
    "UnreadableStore",
    "ValueCache",
    "end_offsets",
    "field_index",
]
