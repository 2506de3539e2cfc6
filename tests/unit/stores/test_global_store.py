"""GlobalStore API edges that need no broker: settings refused, the read-only view of a
store directory and its mapping manners."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore import (
    ConfigurationError,
    FatalError,
    GlobalStore,
    ReadOnlyStore,
    StorageError,
)
from globalstore.replicas.announce import BATCHES, READERS
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


def test_a_read_only_view_answers_beside_the_store_that_holds_the_directory(
    tmp_path: Path,
) -> None:
    storage = Storage(tmp_path / "s")
    storage.initialise("orders", None, 1)
    storage.apply(
        batch(("a", '"x"'), ("b", "2"), ("c", "3"), ("a", None), p=1, start=3), {}, True, 10
    )
    storage.mark_restored(1_700_000_000_000)
    try:
        with ReadOnlyStore(tmp_path / "s") as view:  # while the directory is locked
            report = view.status()
            assert view["b"] == 2 and view.get("a", "gone") == "gone" and "c" in view
            with pytest.raises(KeyError):
                view["a"]
            assert view.get_many(["c", "a", "b"]) == {"c": 3, "b": 2}
            assert list(view.values()) == [2, 3]
            assert [(e.key, e.value, e.partition, e.offset) for e in view.entries()] == [
                ("b", 2, 1, 4),
                ("c", 3, 1, 5),
            ]
            assert view.count() == 2
    finally:
        storage.close()
    assert report.state == "offline" and not report.ready and not report.connected
    assert report.topic == "orders" and report.position == {1: 7} and report.key_count == 2
    assert report.last_restore_at == 1_700_000_000.0 and report.layout_version == 1
    assert report.lag == {} and report.staleness_seconds is None


def test_a_read_only_view_of_no_store_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no store"):
        ReadOnlyStore(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_a_start_that_fails_after_opening_the_store_releases_it(tmp_path: Path) -> None:
    """The announcer's counter cannot be made (a directory is in its way), after the storage
    is open and the thread made: start() raises one StorageError and lets go of all it took,
    so the same store, then another in this process, start on the same path."""
    obstacle = tmp_path / "s" / READERS / BATCHES
    obstacle.mkdir(parents=True)
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "s")
    with pytest.raises(StorageError, match=r"announcing the store at .* to reader processes"):
        store.start(timeout=5)
    assert store.status().state == "closed"
    obstacle.rmdir()
    store.start(timeout=5, wait=False)  # the lock was released: the same store starts again
    assert store.status().state != "closed"
    store.close()
    other = GlobalStore("t", "127.0.0.1:1", tmp_path / "s").start(timeout=5, wait=False)
    other.close()


@pytest.mark.parametrize(
    "setting",
    [
        {"enable.partition.eof": False},
        {"auto.offset.reset": "earliest"},
        {"isolation.level": "read_uncommitted"},
        {"enable.auto.commit": True},
        {"enable.auto.offset.store": True},
        {"group.id": "my-app"},
    ],
)
def test_settings_the_store_relies_on_cannot_be_overridden(
    tmp_path: Path, setting: dict[str, object]
) -> None:
    [name] = setting
    with pytest.raises(ConfigurationError, match=name.replace(".", r"\.")):
        GlobalStore("t", "127.0.0.1:1", tmp_path / "s", kafka_config=setting)
