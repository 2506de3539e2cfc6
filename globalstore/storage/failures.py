"""What an error RocksDB or rocksdict raised means for the store, decided in one place.

rocksdict raises a bare Exception whose text starts with RocksDB's status code ("Corruption:
block checksum mismatch ...", "IO error: ... /LOCK: ..."); it exposes no code or type of its
own, so the text is all there is to go on. Its borrow checker raises a RuntimeError of its own
("Already borrowed") when close() meets a read still in progress on another thread.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from globalstore.errors import StorageError


class Failure(enum.Enum):
    LOCKED = "locked"  # another process (or handle) has the database: StoreLocked
    DAMAGED = "damaged"  # RocksDB cannot make sense of its own files: wipe and rebuild
    ENVIRONMENT = "environment"  # permissions, disk full, ...: a rebuild would not fix it


def classify(exc: BaseException) -> Failure:
    """What an error opening a database means, from the status code its message starts with."""
    code, _, detail = str(exc).partition(":")
    if code == "IO error" and ("/LOCK:" in detail or "lock hold by" in detail):
        return Failure.LOCKED
    if code in ("Corruption", "Invalid argument"):
        return Failure.DAMAGED
    if code == "IO error" and "No such file or directory" in detail:
        return Failure.DAMAGED  # a table file the manifest lists is gone
    return Failure.ENVIRONMENT


def is_borrowed(exc: BaseException) -> bool:
    """True for rocksdict's refusal to close a database another thread is reading."""
    return isinstance(exc, RuntimeError) and "already borrowed" in str(exc).lower()


CLOSE_WAIT_S = 30.0
"""How long close() waits for reads already inside RocksDB on other threads."""


def close_when_unborrowed(close: Callable[[], None]) -> None:
    """Close a database once no other thread is inside one of its calls. rocksdict lets go
    of the GIL inside a read, and close() refuses to run while one is in progress ("Already
    borrowed"). New reads cannot start (their handles are gone), so the ones in progress,
    a multi-get at most, end soon."""
    deadline = time.monotonic() + CLOSE_WAIT_S
    while True:
        try:
            close()
            return
        except RuntimeError as exc:
            if not is_borrowed(exc):
                raise
            if time.monotonic() > deadline:
                raise StorageError(
                    f"RocksDB still in use by another thread after {CLOSE_WAIT_S:.0f} s"
                ) from exc
        time.sleep(0.001)
