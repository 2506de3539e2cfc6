"""At start, of the store and a copy rebuilt beside it, the one whose restore completed last
is kept; an incomplete rebuild never replaces anything."""

from __future__ import annotations

from pathlib import Path

from globalstore.heal import BESIDE, adopt_rebuilt
from globalstore.storage import Storage
from tests.unit.store_fakes import batch


def _store(path: Path, key: str, restored_at: int | None) -> None:
    s = Storage(path)
    s.initialise("t", None, 0)
    s.apply(batch((key, "1")), True, 1)
    if restored_at is not None:
        s.mark_restored(restored_at)
    s.close()


def _keys(path: Path) -> list[bytes]:
    s = Storage(path)
    try:
        adopt_rebuilt(s)
        return [k for k, _ in s.scan(None, None, False)]
    finally:
        s.close()


def test_a_complete_rebuild_is_adopted(tmp_path: Path) -> None:
    _store(tmp_path, "old", 2)
    _store(tmp_path / BESIDE, "new", 3)
    assert _keys(tmp_path) == [b"new"]
    assert not (tmp_path / BESIDE).exists()


def test_an_interrupted_rebuild_is_dropped(tmp_path: Path) -> None:
    _store(tmp_path, "old", 2)
    _store(tmp_path / BESIDE, "new", None)  # killed before it reached its end offsets
    assert _keys(tmp_path) == [b"old"]
    assert not (tmp_path / BESIDE).exists()


def test_a_crash_half_way_through_adopting_is_finished_at_the_next_start(tmp_path: Path) -> None:
    _store(tmp_path / BESIDE, "new", 3)  # the old copy was removed, the new not yet moved
    assert _keys(tmp_path) == [b"new"]


def test_a_second_heal_rebuilt_in_the_store_itself_keeps_it(tmp_path: Path) -> None:
    # The first heal's copy beside (restored at 3) was replaced by a second heal, which took
    # turns and rebuilt in the store's own directory (restored at 5).
    _store(tmp_path / BESIDE, "first heal", 3)
    _store(tmp_path, "second heal", 5)
    assert _keys(tmp_path) == [b"second heal"]
    assert not (tmp_path / BESIDE).exists()


def test_a_second_heal_killed_half_way_leaves_the_first_ones_copy(tmp_path: Path) -> None:
    _store(tmp_path / BESIDE, "first heal", 3)
    _store(tmp_path, "second heal, incomplete", None)
    assert _keys(tmp_path) == [b"first heal"]
