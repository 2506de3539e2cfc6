"""A Storage does what the write rules it was made with say (storage/rules.py), and only that:
defined, they index each write, keep its time entry and its versions, and check its value;
made again without them (a restart with another config), define() drops what they kept."""

from __future__ import annotations

import time
from pathlib import Path

from globalstore.config import OnInvalidValue, StoreConfig
from globalstore.storage import Storage
from tests.unit.prepared import prepared
from tests.unit.store_fakes import batch


def _courier(_key: str, value: dict[str, str]) -> str:
    return value["courier"]


def _written(storage: Storage) -> None:
    now = int(time.time() * 1000)
    records = [(k, v, h, p, o, now) for k, v, h, p, o, _ in batch(("a", '{"courier": "c-1"}'))]
    storage.apply([*records, (b"bad", b"not json", None, 0, 1, now)], {}, True, 1)


def test_the_rules_a_storage_is_made_with_decide_what_its_writes_do(tmp_path: Path) -> None:
    shaped = StoreConfig(
        "t", "f:1", tmp_path, indexes={"by_courier": _courier}, ttl=60, history=3600,
        invalid_values=OnInvalidValue.QUARANTINE,
    )  # fmt: skip
    storage = prepared(shaped)
    _written(storage)
    state = storage.state
    assert state.ttl_ms == 60_000 and state.history_ms == 3_600_000
    assert dict(state.index_entries) == {"by_courier": 1} and state.time_entries == 1
    assert storage.get(b"bad") is None and storage.quarantine is not None
    assert storage.quarantine.keys == {b"bad"}  # held apart, read back at the next define
    storage.close()

    storage = prepared(StoreConfig("t", "f:1", tmp_path))  # the same files, no rules
    state = storage.state
    assert state.ttl_ms is None and state.history_ms is None and not state.indexes
    assert storage.index is None or storage.index_count(b"", b"\xff") == 0
    storage.close()


def test_a_storage_made_without_rules_stores_records_and_nothing_else(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    storage.initialise("t", None, 1)
    storage.load(storage.read_meta())
    storage.define(bulk=False, now_ms=1)
    _written(storage)
    assert storage.get(b"bad") is not None and storage.quarantine is None
    assert storage.index is None and storage.state.count == 2
    storage.close()
