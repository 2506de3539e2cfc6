"""How the store reads RocksDB's errors (by the status code that starts their text), and that
every write of Storage turns them into one StorageError. Here a full disk is injected at the
RocksDB handle; tests/integration/test_store_disk_full.py fills a real one."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import rocksdict

from globalstore.errors import ConfigurationError, StorageError
from globalstore.storage import Storage, opening
from globalstore.storage.failures import Failure, classify, disk_report, is_absent, is_borrowed
from globalstore.storage.keys import entry_key
from globalstore.storage.lock import DirLock
from globalstore.storage.meta import INDEX_CF, K_IN_SYNC_AT, META_CF
from globalstore.storage.scan import index_items
from tests.unit.store_fakes import NO_SPACE, FullDisk, batch


@pytest.mark.parametrize(
    ("message", "failure"),
    [
        ("IO error: lock hold by current process, acquire time 1: /s/db/LOCK: No locks", "LOCKED"),
        ("IO error: While lock file: /s/db/LOCK: Resource temporarily unavailable", "LOCKED"),
        ("Corruption: block checksum mismatch: stored = 1, computed = 2", "DAMAGED"),
        ("IO error: No such file or directory: While open a file: /s/db/000009.sst", "DAMAGED"),
        ("Invalid argument: Column families not opened: extra", "REFUSED"),
        ("Invalid argument: Compression type ZSTD is not linked with the binary.", "REFUSED"),
        (NO_SPACE, "DISK"),
        ("IO error: While appending to file: /s/db/000004.log: Input/output error", "DISK"),
        ("Corruption: truncated block read: No space left on device", "DISK"),
        ("IO error: Permission denied: While opening a file: /s/db/CURRENT", "ENVIRONMENT"),
        ("something else entirely", "ENVIRONMENT"),
    ],
)
def test_the_status_code_decides(message: str, failure: str) -> None:
    assert classify(Exception(message)) is Failure[failure]


@pytest.mark.parametrize(
    ("code", "failure"),
    [(errno.ENOSPC, "DISK"), (errno.EIO, "DISK"), (errno.EACCES, "ENVIRONMENT")],
)
def test_a_file_operation_is_read_by_its_errno(code: int, failure: str) -> None:
    assert classify(OSError(code, os.strerror(code))) is Failure[failure]


def test_a_real_second_handle_is_read_as_locked(tmp_path: Path) -> None:
    db = rocksdict.Rdict(str(tmp_path / "db"))
    try:
        with pytest.raises(Exception) as raised:
            rocksdict.Rdict(str(tmp_path / "db"))
        assert classify(raised.value) is Failure.LOCKED
    finally:
        db.close()


def test_only_rocksdicts_borrow_refusal_is_borrowed() -> None:
    assert is_borrowed(RuntimeError("Already borrowed"))
    assert not is_borrowed(RuntimeError("something else"))
    assert not is_borrowed(Exception("Already borrowed"))  # not rocksdict's own error type


def mount_point(path: Path) -> Path:
    while not os.path.ismount(path):
        path = path.parent
    return path


def test_the_disk_report_names_the_mount_point_and_its_free_space(tmp_path: Path) -> None:
    report = disk_report(tmp_path / "not" / "made" / "yet")
    assert report.startswith(f"disk {mount_point(tmp_path)}: ") and " MiB free of " in report


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Storage]:
    """A store holding key "a" whose disk is then full."""
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    storage.apply(batch(("a", "1")), {}, True, 1)
    storage._db = FullDisk(storage._db)  # type: ignore[assignment]  # every write is a batch
    yield storage
    storage.close()


WRITES: dict[str, Callable[[Storage], object]] = {
    "apply": lambda s: s.apply(batch(("b", "2"), start=1), {}, True, 2),
    "bulk apply": lambda s: s.apply(batch(("b", "2"), start=1), {}, False, 2),
    "heartbeat": lambda s: s.mark_in_sync(3),
    "put_meta": lambda s: s.put_meta(K_IN_SYNC_AT, None),
    "mark_restored": lambda s: s.mark_restored(3),
    "begin_recount (its flush)": lambda s: s.begin_recount(),
    "write_values": lambda s: s.write_values([(b"a", b"x")]),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_every_write_on_a_full_disk_is_one_storage_error_naming_the_disk(
    full: Storage, write: Callable[[Storage], object], tmp_path: Path
) -> None:
    with pytest.raises(StorageError) as raised:
        write(full)
    message = str(raised.value)
    assert str(tmp_path / "s") in message and "No space left on device" in message
    assert f"disk {mount_point(tmp_path)}: " in message and " MiB free of " in message
    assert full.get(b"a") is not None  # reads keep answering from what is stored


def test_the_recount_storing_its_result_on_a_full_disk_is_a_storage_error(
    tmp_path: Path,
) -> None:
    storage = Storage(tmp_path / "s")
    try:
        storage.apply(batch(("a", "1")), {}, False, 1)
        storage.begin_recount()
        storage._db = FullDisk(storage._db)  # type: ignore[assignment]
        with pytest.raises(StorageError, match="No space left on device"):
            storage.recount_step(10)
    finally:
        storage.close()


def test_a_close_whose_flush_fails_releases_the_store(full: Storage, tmp_path: Path) -> None:
    full.close()  # logs the failed flush: nothing it lost was covered by a stored offset
    again = Storage(tmp_path / "s")
    try:
        assert again.get(b"a") is not None
    finally:
        again.close()


def test_a_refill_that_meets_a_full_disk_is_a_storage_error(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s")
    try:

        def refill(path: Path) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path / "db"))

        with pytest.raises(StorageError, match=r"No space left on device.*MiB free"):
            storage.wipe(refill)
    finally:
        storage.close()


def test_invalid_argument_is_a_configuration_error_and_never_wipes(tmp_path: Path) -> None:
    """A store holding a column family this version does not know (a newer one's, say):
    RocksDB says "Invalid argument". The files stay as they are."""
    storage = Storage(tmp_path / "s")
    storage.apply(batch(("a", "1")), {}, True, 1)
    storage.close()
    opts = rocksdict.Options(raw_mode=True)
    opts.create_missing_column_families(True)
    families = {META_CF: opts, INDEX_CF: opts, "newer": opts}
    rocksdict.Rdict(str(tmp_path / "s" / "db"), opts, column_families=families).close()
    with pytest.raises(ConfigurationError, match="Column families not opened: newer"):
        Storage(tmp_path / "s")
    db = rocksdict.Rdict(str(tmp_path / "s" / "db"), opts, column_families=families)
    try:
        assert db.get(b"a") is not None  # not wiped
    finally:
        db.close()
    DirLock(tmp_path / "s").release()  # the failed open let go of the store directory


def test_the_open_after_wiping_a_damaged_store_is_wrapped_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocksDB finds the store's files damaged, and the disk has no room for the new database
    the wipe makes way for."""
    failures = iter([Exception("Corruption: block checksum mismatch"), Exception(NO_SPACE)])

    def damaged_then_full(*args: object) -> NoReturn:
        raise next(failures)

    monkeypatch.setattr(opening, "_open", damaged_then_full)
    with pytest.raises(StorageError, match=r"after wiping it failed: .*No space left.*MiB free"):
        Storage(tmp_path / "s")
    DirLock(tmp_path / "s").release()  # the failed open let go of the store directory


def test_an_index_entry_whose_key_is_absent_is_skipped(tmp_path: Path) -> None:
    """rocksdict's Snapshot raises a bare Exception for an absent key, which the index walk
    skips; any other error still goes up."""
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    try:
        db[b"k1"] = b"v1"
        entries = rocksdict.Rdict(str(tmp_path / "idx"), rocksdict.Options(raw_mode=True))
        for key in (b"k0", b"k1"):
            entries[entry_key(1, b"x", key)] = b""
        items = list(index_items(entries.iter(), db.snapshot(), b"", b"\xff", False))
        assert [(key, raw) for _, key, raw in items] == [(b"k1", b"v1")]
        entries.close()
    finally:
        db.close()
    assert is_absent(Exception("key not found"))
    assert not is_absent(Exception("IO error: No space left on device"))
