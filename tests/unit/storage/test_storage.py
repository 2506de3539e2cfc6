"""Storage on a real RocksDB in a tmp dir: atomic batches with offsets, counts, scans, locks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from globalstore import StorageError, StoreLocked
from globalstore.codec import LAYOUT_VERSION, origin
from globalstore.errors import DamagedLayoutError
from globalstore.storage import Storage
from globalstore.storage.meta import K_COUNT, K_LAYOUT
from tests.unit.store_fakes import batch


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    s = Storage(tmp_path / "db")
    s.initialise("t", None, 1)
    yield s
    s.close()


def test_apply_writes_records_and_next_offsets_together(storage: Storage, tmp_path: Path) -> None:
    storage.apply(batch(("a", '{"x":1}'), ("b", '{"x":2}'), p=0, start=10), {}, True, 5)
    storage.apply(batch(("c", '{"x":3}'), p=3, start=7), {}, True, 6)
    assert storage.state.positions == {0: 12, 3: 8}
    raw = storage.get(b"b")
    assert raw is not None and origin(raw) == (1_000, 0, 11)
    storage.close()

    reopened = Storage(tmp_path / "db")
    meta = reopened.read_meta()
    assert meta.offsets == {0: 12, 3: 8}
    assert meta.count == 3 and meta.layout == LAYOUT_VERSION and meta.applied_at_ms == 6
    reopened.close()


def test_tombstones_and_overwrites_keep_exact_count(storage: Storage) -> None:
    storage.apply(batch(("a", "1"), ("b", "2"), ("a", "3"), ("c", None)), {}, True, 1)
    assert storage.state.count == 2
    storage.apply(batch(("a", None), ("a", "4"), ("b", None), ("b", None), start=4), {}, True, 1)
    assert storage.state.count == 1
    assert storage.get(b"b") is None and storage.get(b"a") is not None


def test_bulk_apply_marks_count_unknown_until_recount(storage: Storage) -> None:
    storage.apply(batch(("a", "1"), ("b", "2"), ("a", None), ("c", "3")), {}, False, 1)
    assert storage.state.count is None and storage.get_meta(K_COUNT) is None
    storage.begin_recount()
    # Exact applies after the recount's iterator was made: their changes count once.
    storage.apply(batch(("d", "4"), ("b", None), start=4), {}, True, 2)
    assert storage.recount_step(1) is None and storage.state.count is None
    assert storage.recount_step(1) is None
    assert storage.recount_step(1) == 2  # b, c counted; +d -b applied meanwhile
    assert storage.state.count == 2 and storage.read_meta().count == 2
    storage.apply(batch(("e", "5"), start=6), {}, True, 3)
    assert storage.state.count == 3 and storage.read_meta().count == 3


def test_meta_is_readable_while_the_store_is_open(storage: Storage, tmp_path: Path) -> None:
    storage.apply(batch(("a", "1"), ("b", "2"), p=2, start=5), {}, True, 7)
    storage.mark_restored(1234)
    view = Storage(tmp_path / "db", read_only=True)  # no lock: the store stays open meanwhile
    try:
        meta = view.read_meta()
        assert view.get(b"b") is not None and view.get_many([b"a", b"x"])[1] is None
    finally:
        view.close()
    assert meta.offsets == {2: 7} and meta.count == 2 and meta.restored_at_ms == 1234
    assert meta.topic == "t" and meta.layout == LAYOUT_VERSION
    with pytest.raises(StorageError, match="no store"):
        Storage(tmp_path / "elsewhere", read_only=True)
    assert not (tmp_path / "elsewhere").exists()


def test_a_partition_end_past_the_last_record_is_a_position(storage: Storage) -> None:
    # Offsets 1..3 hold a transaction marker and aborted records: never delivered, yet the
    # consumer reached offset 4, and so did the store.
    out = storage.apply(batch(("a", "1")), {0: 4}, True, 1)
    assert out.records == 1
    assert storage.state.positions == {0: 4}
    assert storage.read_meta().offsets == {0: 4}
    # An end already reached moves nothing and writes nothing.
    assert storage.apply([], {0: 4}, True, 2).records == 0
    assert storage.read_meta().applied_at_ms == 1
    # Records after the end (produced since): the next offset after the last one. The end
    # of an empty partition is its position too.
    storage.apply(batch(("b", "2"), start=4), {0: 4, 1: 0}, True, 3)
    assert storage.state.positions == {0: 5, 1: 0}
    assert storage.read_meta().offsets == {0: 5, 1: 0}


def test_records_keep_their_format_timestamp_and_origin(storage: Storage) -> None:
    # Plain records: a declared format other than the current one is kept, bytes for bytes.
    headers = [("other", b"x"), ("globalstore.format", b"2")]
    storage.apply([(b"k", b"{}", headers, 2, 7, 1234), (None, b"x", None, 2, 8, 1)], {}, True, 1)
    raw = storage.get(b"k")
    assert raw is not None and raw[1] == 2 and origin(raw) == (1234, 2, 7)
    assert storage.state.positions == {2: 9} and storage.state.count == 1


def test_scan_is_a_point_in_time_view(storage: Storage) -> None:
    storage.apply(batch(*[(f"k{i}", "1") for i in range(100)]), {}, True, 1)
    view = storage.scan(None, None, False)
    # Writes after the scan began (an update, a delete, a new key) must not show up in it.
    storage.apply(batch(("k5", "2"), ("k50", None), ("k99x", "3"), start=100), {}, True, 2)
    seen = dict(view)
    assert len(seen) == 100 and b"k50" in seen and b"k99x" not in seen
    assert seen[b"k5"].endswith(b"1")


@pytest.mark.parametrize(
    ("lower", "upper", "reverse", "expected"),
    [
        (b"b", b"d", False, [b"b", b"bb", b"c"]),
        (b"b", b"d", True, [b"c", b"bb", b"b"]),
        (None, b"bb", True, [b"b", b"a"]),
        (b"c", None, False, [b"c", b"d"]),
        (None, None, True, [b"d", b"c", b"bb", b"b", b"a"]),
    ],
)
def test_scan_bounds(storage: Storage, lower, upper, reverse, expected) -> None:  # type: ignore[no-untyped-def]
    storage.apply(batch(*[(k, "1") for k in ["a", "b", "bb", "c", "d"]]), {}, True, 1)
    assert [k for k, _ in storage.scan(lower, upper, reverse)] == expected


def test_second_open_in_same_process_is_locked(storage: Storage, tmp_path: Path) -> None:
    with pytest.raises(StoreLocked, match=f"another store in this process \\(pid {os.getpid()}\\)"):
        Storage(tmp_path / "db")


def test_second_process_is_locked(storage: Storage, tmp_path: Path) -> None:
    code = (
        "import sys\nfrom globalstore.storage import Storage\nfrom globalstore import StoreLocked\n"
        f"try:\n    Storage({str(tmp_path / 'db')!r})\nexcept StoreLocked as e:\n"
        "    print('LOCKED', e); sys.exit(0)\nsys.exit(1)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "LOCKED" in out.stdout and "in use by another process (pid" in out.stdout


def test_close_waits_for_reads_in_progress_on_other_threads(tmp_path: Path) -> None:
    """A multi-get of 20k keys holds the database for a while; close() used to fail at once
    ("Already borrowed") and leave the store locked."""
    storage = Storage(tmp_path / "db")
    storage.initialise("t", None, 1)
    keys = [f"k{i:05d}" for i in range(20_000)]
    storage.apply(batch(*[(k, "1") for k in keys]), {}, True, 1)
    encoded = [k.encode() for k in keys]
    reads: list[int] = []
    ended: list[BaseException] = []

    def reader() -> None:
        try:
            while True:
                reads.append(sum(v is not None for v in storage.get_many(encoded)))
        except BaseException as exc:  # the read after close()
            ended.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for thread in readers:
        thread.start()
    deadline = time.monotonic() + 30
    while len(reads) < 8:
        assert time.monotonic() < deadline and not ended, (len(reads), ended)
        time.sleep(0.001)
    storage.close()
    for thread in readers:
        thread.join(30)
    assert set(reads) == {20_000}
    assert len(ended) == 4
    Storage(tmp_path / "db").close()  # closed for real: the lock and RocksDB's LOCK are free


def test_damaged_meta_is_reported(storage: Storage) -> None:
    storage.put_meta(K_LAYOUT, b"\xff garbage")
    with pytest.raises(DamagedLayoutError):
        storage.read_meta()


def test_unreadable_rocksdb_files_are_wiped_on_open(tmp_path: Path) -> None:
    s = Storage(tmp_path / "db")
    s.apply(batch(("a", "1")), {}, False, 1)
    s.close()
    for f in (tmp_path / "db" / "db").glob("CURRENT"):
        f.write_text("MANIFEST-999999\n")  # points at a manifest that does not exist
    s = Storage(tmp_path / "db")
    try:
        assert s.read_meta().layout is None and s.is_empty()
    finally:
        s.close()


def _crash_after(tmp_path: Path, steps: str) -> None:
    """In a child process: a new store, an exact apply, a bulk apply, then `steps`, then
    os._exit (no close, no flush): what RocksDB holds afterwards is what a crash leaves."""
    code = (
        "import os\nfrom globalstore.storage import Storage\n"
        "from tests.unit.store_fakes import batch\n"
        f"s = Storage({str(tmp_path / 'db')!r})\ns.initialise('t', None, 1)\n"
        "s.apply(batch(('a', '1'), p=0), {}, True, 1)\n"
        "s.apply(batch(('b', '2'), ('c', '3'), p=1), {}, False, 2)\n"
        f"{steps}\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3], check=True)


def test_a_crash_loses_unlogged_bulk_batches_with_their_offsets(tmp_path: Path) -> None:
    _crash_after(tmp_path, "")
    s = Storage(tmp_path / "db")
    try:
        # The logged batch survives through the WAL; the bulk one is gone, offset and all.
        assert s.read_meta().offsets == {0: 1}
        assert s.get(b"a") is not None and s.get(b"b") is None and s.get(b"c") is None
    finally:
        s.close()


def test_ending_a_bulk_restore_makes_its_batches_durable(tmp_path: Path) -> None:
    _crash_after(tmp_path, "s.begin_recount()")
    s = Storage(tmp_path / "db")
    try:
        assert s.read_meta().offsets == {0: 1, 1: 2}
        assert [s.get(k) is not None for k in (b"a", b"b", b"c")] == [True, True, True]
    finally:
        s.close()


def test_a_bulk_apply_lists_changed_keys_only_when_asked(storage: Storage) -> None:
    quiet = storage.apply(batch(("a", "1"), ("b", None)), {}, False, 1, list_keys=False)
    assert quiet.present == {} and storage.get(b"a") is not None
    told = storage.apply(batch(("c", "1"), ("a", None), start=2), {}, False, 2)
    assert told.present == {b"c": True, b"a": False} and storage.get(b"a") is None
