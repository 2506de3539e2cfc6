"""The SHA-256 of table files a process has sent in a snapshot, remembered for the next one.

A snapshot stream is a fresh checkpoint, and a checkpoint hard-links the store's table files
(.sst) rather than copying them; RocksDB never changes a table file once it is written. So
a peer sending snapshot after snapshot (a fan-out of new instances) would hash the same
files each time: what it hashed once is kept here, by the file's identity (device, inode,
size, modification time; a hard link shares all four, and linking changes none of them),
and the next send only reads and sends it. The other files of a checkpoint (MANIFEST,
OPTIONS, CURRENT) are written anew for each one and always hashed.

A digest remembered for a file whose bytes later rotted on disk no longer matches them: the
receiver, hashing what arrives, refuses the snapshot and restores from Kafka. (Hashed anew,
the rotten bytes would have matched their own digest.)
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

__all__ = ["LIMIT", "SENT", "TABLE_SUFFIX", "KnownDigests"]

TABLE_SUFFIX = ".sst"
LIMIT = 10_000  # files remembered; a 50M-key store has about a hundred


class KnownDigests:
    """Table files' digests by identity, the least recently used forgotten past `limit`;
    safe to use from several sending threads."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._digests: OrderedDict[tuple[int, int, int, int], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path, stat: os.stat_result) -> str | None:
        """The digest remembered for this table file, None if unknown or not a table file."""
        if path.suffix != TABLE_SUFFIX:
            return None
        key = _identity(stat)
        with self._lock:
            digest = self._digests.get(key)
            if digest is not None:
                self._digests.move_to_end(key)
            return digest

    def remember(self, path: Path, stat: os.stat_result, sha256: str) -> None:
        """Keep `sha256`, hashed from the file `stat` describes, if it is a table file."""
        if path.suffix != TABLE_SUFFIX:
            return
        key = _identity(stat)
        with self._lock:
            self._digests[key] = sha256
            self._digests.move_to_end(key)
            while len(self._digests) > self._limit:
                self._digests.popitem(last=False)


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


SENT = KnownDigests()  # the process's, over every store it sends from (the key has the device)
