"""The store directory's lock: one process per directory, released when that process dies."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from globalstore.errors import ConfigurationError, StoreLocked
from globalstore.storage.failures import reported

__all__ = ["LOCK_FILE", "DirLock", "NoLock"]

LOCK_FILE = "globalstore.lock"


class DirLock:
    """An fcntl lock on a file in the store directory, holding the owner's pid for messages."""

    def __init__(self, directory: Path) -> None:
        locking = f"locking the store directory {directory}"
        if directory.exists() and not directory.is_dir():
            raise ConfigurationError(
                f"the store's path {directory} is a file: it must name a directory (made if "
                "missing)"
            )
        with reported(locking, directory):
            directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self._fd)
            raise StoreLocked(_in_use(directory, holder)) from None
        try:
            with reported(locking, directory):  # a full disk has no room even for the pid
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, str(os.getpid()).encode("ascii"), 0)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Unlock and close the lock file; a second call does nothing."""
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _in_use(directory: Path, holder: str) -> str:
    # flock locks belong to open files, so a second store on one path in the same process is
    # refused too; naming our own pid "another process" sent users looking for one.
    if holder == str(os.getpid()):
        return (
            f"store directory {directory} is in use by another store in this process "
            f"(pid {holder}): close that one first, or query it instead"
        )
    return f"store directory {directory} is in use by another process (pid {holder or '?'})"


class NoLock:
    """A read-only store takes no lock: it neither writes nor keeps others from writing."""

    def release(self) -> None:
        """Nothing to release."""
        pass
