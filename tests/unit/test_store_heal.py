"""At start, a copy rebuilt beside the store replaces it only if that rebuild completed."""

from __future__ import annotations

from pathlib import Path

from globalstore.heal import BESIDE, adopt_rebuilt
from globalstore.storage import Storage
from tests.unit.store_fakes import batch


def _store(path: Path, key: str, restored: bool) -> None:
    s = Storage(path)
    s.initialise("t", None, 0)
    s.apply(batch((key, "1")), True, 1)
    if restored:
        s.mark_restored(2)
    s.close()


def _keys(path: Path) -> list[bytes]:
    s = Storage(path)
    try:
        adopt_rebuilt(s)
        return [k for k, _ in s.scan(None, None, False)]
    finally:
        s.close()


def test_a_complete_rebuild_is_adopted(tmp_path: Path) -> None:
    _store(tmp_path, "old", True)
    _store(tmp_path / BESIDE, "new", True)
    assert _keys(tmp_path) == [b"new"]
    assert not (tmp_path / BESIDE).exists()


def test_an_interrupted_rebuild_is_dropped(tmp_path: Path) -> None:
    _store(tmp_path, "old", True)
    _store(tmp_path / BESIDE, "new", False)  # killed before it reached its end offsets
    assert _keys(tmp_path) == [b"old"]
    assert not (tmp_path / BESIDE).exists()


def test_a_crash_half_way_through_adopting_is_finished_at_the_next_start(tmp_path: Path) -> None:
    _store(tmp_path / BESIDE, "new", True)  # the old copy was removed, the new not yet moved
    assert _keys(tmp_path) == [b"new"]
