"""GlobalStore API edges that need no broker: settings the Kafka client refuses, offline
inspection of a store directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore import ConfigurationError, FatalError, GlobalStore, StorageError
from globalstore.storage import Storage
from tests.unit.store_fakes import batch


def test_a_setting_the_client_refuses_is_a_configuration_error(tmp_path: Path) -> None:
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "s", kafka_config={"bogus.setting": 1})
    with pytest.raises(ConfigurationError, match=r"bogus\.setting") as raised:
        store.start(timeout=5)
    assert isinstance(raised.value, FatalError)
    store.close()


def test_a_bad_value_is_a_configuration_error(tmp_path: Path) -> None:
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "s", kafka_config={"fetch.max.bytes": "x"})
    with pytest.raises(ConfigurationError, match=r"fetch\.max\.bytes"):
        store.start(timeout=5)
    store.close()


def test_inspect_reads_a_store_without_kafka(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s")
    storage.initialise("orders", None, 1)
    storage.apply(batch(("a", "1"), ("b", "2"), ("a", None), p=1, start=3), True, 10)
    storage.mark_restored(1_700_000_000_000)
    try:
        report = GlobalStore.inspect(tmp_path / "s")  # while the directory is locked
    finally:
        storage.close()
    assert report.state == "offline" and not report.ready and not report.connected
    assert report.topic == "orders" and report.position == {1: 6} and report.key_count == 1
    assert report.last_restore_at == 1_700_000_000.0 and report.layout_version == 1
    assert report.lag == {} and report.staleness_seconds is None


def test_inspect_of_no_store_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no store"):
        GlobalStore.inspect(tmp_path / "nothing")
