"""What an error RocksDB or rocksdict raised means for the store, decided in one place, and
the one wrapper that turns it into a GlobalStoreError.

rocksdict raises a bare Exception whose text starts with RocksDB's status code ("Corruption:
block checksum mismatch ...", "IO error: ... /LOCK: ..."); it exposes no code or type of its
own, so the text is all there is to go on. Its borrow checker raises a RuntimeError of its own
("Already borrowed") when close() meets a read still in progress on another thread.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from globalstore.errors import ConfigurationError, GlobalStoreError, StorageError, StoreLocked

__all__ = [
    "CLOSE_WAIT_S",
    "Failure",
    "classify",
    "close_when_unborrowed",
    "disk_report",
    "is_absent",
    "is_borrowed",
    "open_refusal",
    "reported",
    "storage_error",
]

log = logging.getLogger(__name__)


class Failure(enum.Enum):
    """What a RocksDB error means, and so what the store does about it."""

    LOCKED = "locked"  # another process (or handle) has the database: StoreLocked
    DAMAGED = "damaged"  # RocksDB cannot make sense of its own files: wipe and rebuild
    REFUSED = "refused"  # RocksDB refuses the settings or the files' features: configuration
    DISK = "disk"  # the disk is full or failing: free space (or replace it), never wipe
    ENVIRONMENT = "environment"  # permissions, ...: a rebuild would not fix it


# strerror() of ENOSPC, EDQUOT and EIO, as RocksDB's messages quote them.
_DISK_WORDS = ("No space left on device", "Disk quota exceeded", "Input/output error")
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def classify(exc: BaseException) -> Failure:
    """What an error of RocksDB (or of a file operation in the store) means, from the status
    code its message starts with."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return Failure.DISK if exc.errno in _DISK_ERRNOS else Failure.ENVIRONMENT
    code, _, detail = str(exc).partition(":")
    if code == "IO error" and ("/LOCK:" in detail or "lock hold by" in detail):
        return Failure.LOCKED
    if any(words in detail for words in _DISK_WORDS):
        return Failure.DISK  # checked before damage: a full disk is never a reason to wipe
    if code == "Corruption":
        return Failure.DAMAGED
    if code == "Invalid argument":
        # A column family this version does not know, a compression the build lacks: the
        # files may be fine, so wiping them would lose data and then fail all the same.
        return Failure.REFUSED
    if code == "IO error" and "No such file or directory" in detail:
        return Failure.DAMAGED  # a table file the manifest lists is gone
    return Failure.ENVIRONMENT


def open_refusal(exc: BaseException, path: Path, wipe: bool) -> GlobalStoreError | None:
    """What to raise when opening the store at `path` failed with `exc`; None when RocksDB's
    files are damaged and `wipe` allows a rebuild from the topic, the source of truth."""
    failure = classify(exc)
    if failure is Failure.LOCKED:
        return StoreLocked(f"RocksDB in {path} is locked: {exc}")
    if failure is Failure.REFUSED:
        return ConfigurationError(
            f"RocksDB refused to open the store at {path}: {exc}. The settings "
            "(RocksDBOptions) or this build of RocksDB do not fit its files, which are "
            "left as they are: a store is never wiped for this"
        )
    if failure is not Failure.DAMAGED or not wipe:
        return storage_error(f"opening RocksDB in {path}", exc, path)
    return None


def storage_error(doing: str, exc: BaseException, path: Path) -> StorageError:
    """The StorageError for `exc`, met while `doing` ("writing to the store at ..."); for a
    full or failing disk it names the disk and its free space too."""
    message = f"{doing} failed: {exc}"
    if classify(exc) is Failure.DISK:
        message += f" ({disk_report(path)}; free space there and restart: nothing is wiped)"
    return StorageError(message)


@contextlib.contextmanager
def reported(doing: str, path: Path) -> Iterator[None]:
    """Every RocksDB call that writes runs inside this: what it raises becomes a StorageError
    (storage_error) and GlobalStoreErrors pass as they are."""
    try:
        yield
    except GlobalStoreError:
        raise
    except Exception as exc:
        raise storage_error(doing, exc, path) from exc


def disk_report(path: Path) -> str:
    """The file system holding `path`, as "disk /mnt/data: 0.0 MiB free of 12.0 MiB"."""
    existing = Path(os.path.abspath(path))
    while not existing.exists():
        existing = existing.parent
    mount = existing
    while not os.path.ismount(mount):
        mount = mount.parent
    usage = shutil.disk_usage(existing)
    return f"disk {mount}: {usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.1f} MiB"


def is_borrowed(exc: BaseException) -> bool:
    """True for rocksdict's refusal to close a database another thread is reading."""
    return isinstance(exc, RuntimeError) and "already borrowed" in str(exc).lower()


def is_absent(exc: BaseException) -> bool:
    """True for a point read of a key that is not there through a Snapshot: rocksdict raises
    a bare Exception("key not found") for it, not KeyError."""
    return type(exc) is Exception and "key not found" in str(exc).lower()


CLOSE_WAIT_S = 30.0
"""How long close() waits for reads already inside RocksDB on other threads."""


def close_when_unborrowed(close: Callable[[], None], path: Path) -> None:
    """Close the database of the store at `path` once no other thread is inside one of its
    calls. rocksdict lets go of the GIL inside a read, and close() refuses to run while one
    is in progress ("Already borrowed"). New reads cannot start (their handles are gone), so
    the ones in progress, a multi-get at most, end soon."""
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
        except Exception as exc:
            # Its last flush failed (a full disk), yet rocksdict has closed the database. The
            # flush lost only what was written without the write-ahead log, its offsets with
            # it (atomic flush): the next start resumes from the offsets that were kept.
            log.warning("%s", storage_error(f"closing the store at {path}", exc, path))
            return
        time.sleep(0.001)
