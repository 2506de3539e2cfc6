"""get_many over a store directory (no broker): what it answers, and that it reads all its
keys at one sequence number while batches are being applied."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from globalstore import ReadOnlyStore, StoreClosed
from globalstore.storage import Storage
from globalstore.stores.store import Store
from tests.unit.store_fakes import OneCopy, batch


@pytest.fixture
def view(tmp_path: Path) -> ReadOnlyStore:
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    storage.apply(batch(("a", "1"), ("b", '{"n": 2}'), ("c", "3"), ("c", None)), {}, True, 1)
    storage.close()
    with ReadOnlyStore(tmp_path / "s") as view:
        yield view


def test_present_keys_in_the_order_asked_absent_ones_left_out(view: ReadOnlyStore) -> None:
    found = view.get_many(["b", "zz", "c", "a"])
    assert found == {"b": {"n": 2}, "a": 1}
    assert list(found) == ["b", "a"]


def test_a_key_asked_twice_is_answered_once(view: ReadOnlyStore) -> None:
    assert view.get_many(["a", "b", "a"]) == {"a": 1, "b": {"n": 2}}


def test_no_keys_no_answer(view: ReadOnlyStore) -> None:
    assert view.get_many([]) == {}
    assert view.get_many(k for k in ()) == {}


def test_any_iterable_of_keys(view: ReadOnlyStore) -> None:
    assert view.get_many(k for k in ("a", "x")) == {"a": 1}
    assert view.get_many(("b",)) == {"b": {"n": 2}}


def test_answers_equal_a_loop_of_get(view: ReadOnlyStore) -> None:
    keys = ["a", "b", "c", "d"]
    looped = {k: view.get(k) for k in keys if k in view}
    assert view.get_many(keys) == looped


def test_a_closed_store_says_so(view: ReadOnlyStore) -> None:
    view.close()
    with pytest.raises(StoreClosed):
        view.get_many(["a"])


def _reads(storage: Storage) -> Store:
    """The queries over a storage another thread keeps writing to, as a running store's."""
    return Store(OneCopy(storage, "t"))  # type: ignore[arg-type]  # the reads' part only


def test_all_keys_are_read_at_one_sequence_number(tmp_path: Path) -> None:
    """A writer sets every key to version v in one batch, v = 1, 2, ...: every get_many
    answer holds one version. (A loop of get would mix two batches now and then.)"""
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    keys = [f"k{i:04d}" for i in range(500)]
    storage.apply(batch(*[(k, "0") for k in keys]), {}, True, 1)
    reads = _reads(storage)
    stop = threading.Event()
    versions: list[int] = []

    def writer() -> None:
        v = 0
        while not stop.is_set():
            v += 1
            records = batch(*[(k, str(v)) for k in keys], start=v * len(keys))
            storage.apply(records, {}, False, 1, list_keys=False)
        versions.append(v)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        seen = [set(reads.get_many(keys).values()) for _ in range(300)]
    finally:
        stop.set()
        thread.join(30)
        storage.close()
    assert all(len(answer) == 1 for answer in seen), [a for a in seen if len(a) > 1][:3]
    assert len({v for answer in seen for v in answer}) > 10  # the reads did see batches land
    assert versions[0] > 10
