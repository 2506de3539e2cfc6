"""How the store reads RocksDB's errors: by the status code that starts their text."""

from __future__ import annotations

from pathlib import Path

import pytest
import rocksdict

from globalstore.storage.failures import Failure, classify, is_borrowed


@pytest.mark.parametrize(
    ("message", "failure"),
    [
        ("IO error: lock hold by current process, acquire time 1: /s/db/LOCK: No locks", "LOCKED"),
        ("IO error: While lock file: /s/db/LOCK: Resource temporarily unavailable", "LOCKED"),
        ("Corruption: block checksum mismatch: stored = 1, computed = 2", "DAMAGED"),
        ("Invalid argument: Column family not found: meta", "DAMAGED"),
        ("IO error: No such file or directory: While open a file: /s/db/000009.sst", "DAMAGED"),
        ("IO error: No space left on device: While appending to file: /s/db/LOG", "ENVIRONMENT"),
        ("IO error: Permission denied: While opening a file: /s/db/CURRENT", "ENVIRONMENT"),
        ("something else entirely", "ENVIRONMENT"),
    ],
)
def test_the_status_code_decides(message: str, failure: str) -> None:
    assert classify(Exception(message)) is Failure[failure]


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
