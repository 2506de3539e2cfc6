"""A store that stores values that do not decode counts them exactly: each one marked in the
batch of its value, unmarked by a later value that decodes, a tombstone or a purge; the count
survives a restart; both loops' put alike; each arrival is named in the log. A bulk restore
checks nothing: the pass after it marks and counts them, exact whatever follow batches run
beside it and across a stop at any point."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from globalstore.config import StoreConfig
from globalstore.shaping import quarantine
from globalstore.storage import Storage
from globalstore.storage.meta import K_INVALID_HELD
from globalstore.storage.quarantine import marked
from tests.unit.prepared import prepared
from tests.unit.storage.test_quarantine import PastTheCheckLikeTheCLoop
from tests.unit.store_fakes import LikeTheCLoop, batch


def counting(path: Path) -> Storage:
    """A store as a new one of the default invalid_values ("store") is prepared."""
    config = StoreConfig("t", "x:1", path)
    return prepared(config, meta=quarantine.meta_entries(config))


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = counting(tmp_path / "db")
    yield s
    s.close()


def test_bad_values_are_stored_counted_and_the_count_survives_a_restart(tmp_path: Path) -> None:
    storage = counting(tmp_path / "db")
    assert storage.state.undecodable == 0
    storage.apply(batch(("a", '{"x":1}'), ("b", "not json {"), ("c", "{")), {}, True, 1)
    assert (storage.get(b"b") or b"").endswith(b"not json {")  # stored as it came
    assert storage.state.undecodable == 2 and storage.state.count == 3
    assert storage.state.quarantined == 0
    storage.close()
    reopened = counting(tmp_path / "db")
    assert reopened.state.undecodable == 2
    reopened.apply(batch(("b", '{"ok":1}'), start=3), {}, True, 2)  # keys held are known
    assert reopened.state.undecodable == 1
    reopened.close()


def test_a_value_that_decodes_or_a_tombstone_takes_the_key_out(storage: Storage) -> None:
    storage.apply(batch(("a", "{"), ("b", "{"), ("c", "{")), {}, True, 1)
    storage.apply(batch(("a", "1"), ("b", None), ("d", "{"), ("d", "2"), start=3), {}, True, 2)
    assert storage.state.undecodable == 1  # c
    storage.apply(batch(("e", "2"), ("e", "{"), start=7), {}, True, 3)
    assert storage.state.undecodable == 2  # c, e


def test_both_loops_count_alike(storage: Storage) -> None:
    storage.apply_native(LikeTheCLoop(batch(("a", "1"), ("b", "x"), ("c", "x"))), 0, 1, True)
    past = PastTheCheckLikeTheCLoop(batch(("c", "3"), ("d", "4"), ("e", "x"), start=3))
    storage.apply_native(past, 0, 2, True)
    assert past.unchecked == 1  # d went past the check; c is held, so it was checked
    assert storage.state.undecodable == 2  # b, e
    assert storage.get(b"e") is not None


def test_a_purged_key_is_counted_out(storage: Storage) -> None:
    storage.apply(batch(("a", "{"), ("b", "{")), {}, True, 1)
    deleting = storage.batch()
    deleting.wb.delete(b"a")
    deleting.forget([b"a"])
    storage.commit(deleting)
    assert storage.state.undecodable == 1
    assert storage.read_meta().undecodable == 1


def test_each_arrival_is_named_in_the_log(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        storage.apply(batch(*((f"k{i}", "{") for i in range(12))), {}, True, 1)
    lines = [r.getMessage() for r in caplog.records]
    assert "key 'k0' (partition 0, offset 0) does not decode, stored as it came" in lines[0]
    assert len(lines) == 11 and "2 more values of that batch do not decode" in lines[-1]


def test_a_store_written_before_the_count_says_it_does_not_know(tmp_path: Path) -> None:
    old = counting(tmp_path / "db")
    old.write_values([], {K_INVALID_HELD: None})  # as a store of an earlier version
    old.close()
    storage = counting(tmp_path / "db")
    assert storage.state.undecodable is None and storage.quarantine is None
    storage.apply(batch(("a", "{")), {}, True, 1)
    assert storage.state.undecodable is None
    storage.close()


def bulk_then_counted(storage: Storage, chunk: int, between: object = None) -> int | None:
    """The pass after a bulk restore, `chunk` values a step, calling `between()` (a follow
    batch) after its first step, as the store thread runs them in turn."""
    assert storage.begin_undecodable_count()
    n = storage.undecodable_step(chunk)
    if callable(between):
        between()
    while n is None:
        n = storage.undecodable_step(chunk)
    return n


def test_a_bulk_restore_checks_nothing_and_the_pass_after_it_counts_exactly(
    storage: Storage,
) -> None:
    storage.apply(batch(("a", "{"), ("z", "{")), {}, True, 1)  # marked before the restore
    assert storage.state.undecodable == 2
    records = [("a", None), ("b", "{"), ("c", "1"), ("d", "{"), ("e", "2"), ("f", "{")]
    storage.apply(batch(*records, start=2), {}, False, 2)  # a bulk apply: Python loop
    storage.apply_native(LikeTheCLoop(batch(("g", "x"), ("h", "3"), start=8)), 0, 3)  # C loop
    assert storage.state.undecodable is None and storage.state.undecodable_counting
    assert storage.read_meta().undecodable_counting  # in the batch of the values
    assert storage.read_meta().undecodable is None
    assert (storage.get(b"g") or b"").endswith(b"x")  # stored as it came

    def follow() -> None:
        # Beside the pass: keys behind its cursor and ahead of it change both ways.
        storage.apply(batch(("b", "4"), ("h", "{"), ("f", None), ("i", "{"), start=10), {}, True, 4)

    # Undecodable now: d, g, h, i, z (a was deleted by the restore, b and f changed).
    assert bulk_then_counted(storage, 2, follow) == 5
    assert storage.state.undecodable == 5 and not storage.state.undecodable_counting
    assert storage.read_meta().undecodable == 5
    assert sorted(marked(storage.meta_items)) == [b"d", b"g", b"h", b"i", b"z"]
    storage.apply(batch(("d", "5"), start=14), {}, True, 5)  # counted again per batch
    assert storage.state.undecodable == 4


@pytest.mark.parametrize("steps", [0, 1])
def test_the_count_stays_due_across_a_stop_before_or_during_the_pass(
    tmp_path: Path, steps: int
) -> None:
    storage = counting(tmp_path / "db")
    storage.apply(batch(*((f"k{i}", "{" if i % 3 else "1") for i in range(9))), {}, False, 1)
    if steps:
        assert storage.begin_undecodable_count()
        assert storage.undecodable_step(4) is None  # stopped with the pass cut short
    storage.close()
    reopened = counting(tmp_path / "db")
    assert reopened.state.undecodable is None and reopened.quarantine is not None
    reopened.apply(batch(("k0", "{"), ("k1", "1"), start=9), {}, True, 2)  # a follow batch
    assert reopened.state.undecodable is None  # not a count until the pass ends
    assert bulk_then_counted(reopened, 4) == 6
    assert sorted(marked(reopened.meta_items)) == [b"k0", b"k2", b"k4", b"k5", b"k7", b"k8"]
    reopened.close()
    again = counting(tmp_path / "db")
    assert again.state.undecodable == 6 and not again.begin_undecodable_count()
    again.close()
