"""The one write path of storage/: a reader on another thread sees each write whole, its
positions, count, index and time entries from the same batch, never a mix of two."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from globalstore.storage import StorageState
from tests.unit.shaping.test_indexes import _v
from tests.unit.shaping.test_ttl import NOW, _open, _rec

WRITES = 1_500


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Hand the GIL over as often as CPython allows, so the reader runs between any two
    statements of a write: a state published in steps is then seen half done."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _counts(state: StorageState) -> tuple[int, int, int, int | None]:
    """What one write of a new key moves together: the partition's next offset, the
    courier index's entries, the time entries and the live keys."""
    return (
        state.positions.get(0, 0),
        state.index_entries.get("by_courier", 0),
        state.time_entries,
        state.count,
    )


def test_a_reader_never_sees_two_writes_mixed(tmp_path: Path, fast_switching: None) -> None:
    storage, _ = _open(tmp_path / "s")  # indexes and a ttl: every write changes all four
    seen: list[tuple[int, int, int, int | None]] = []
    mixed: list[tuple[int, int, int, int | None]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            counts = _counts(storage.state)
            seen.append(counts)
            if len(set(counts)) != 1:
                mixed.append(counts)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(WRITES):  # each a new key with one index entry and one time entry
            storage.apply([_rec(f"k{i}", _v(f"c{i}"), NOW, i)], {}, True, NOW)
    finally:
        done.set()
        reader.join()
        storage.close()
    assert _counts(storage.state) == (WRITES,) * 4
    assert mixed == []
    assert len(set(seen)) > 20  # the reader did run between the writes, many times
