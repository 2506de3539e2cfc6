"""`from globalstore import ...` keeps every public name, wherever its module lives."""

from __future__ import annotations

import globalstore

PUBLIC = {
    "ArrowOptions", "AuthenticationError", "AuthorizationError", "BrokerUnavailable", "Change",
    "ChangeFeed", "Resync",
    "ConfigurationError", "ConversionFailed", "DamagedLayoutError", "Entry", "FatalError",
    "FollowingStore", "GlobalStore", "GlobalStoreError", "HistoryUnavailable", "IndexNotReady",
    "InvalidValue",
    "OffsetsOutOfRange", "Quarantined", "ReadOnlyStore", "RetriableError", "RocksDBOptions",
    "ScanFilters", "ScanOptions", "Shape", "SharedStore", "StartTimeout", "State", "StorageError",
    "StoreAlreadyStarted", "StoreClosed", "StoreConfig", "StoreFailed", "StoreListener",
    "StoreLocked", "StoreNotReady", "StoreReader", "StoreSettings", "StoreStatus", "StoreView",
    "SwitchingStore",
    "TopicNotCompacted", "TopicNotFound", "UnknownIndex", "UnreadableStore", "ValueCache",
    "end_offsets", "field_index",
}  # fmt: skip


def test_every_public_name_is_exported() -> None:
    assert set(globalstore.__all__) == PUBLIC
    assert all(getattr(globalstore, name) is not None for name in PUBLIC)
