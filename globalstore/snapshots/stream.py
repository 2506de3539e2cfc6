"""A snapshot as a tar stream: what a peer sends (GET /v1/snapshot), and the format both ends
share. The files of a checkpoint, each hashed as it is sent (unless its digest is known from
an earlier send: digests.py), then the manifest, then the end-of-archive marker; no
compression (table files are compressed already), in chunks of at most CHUNK bytes so a
snapshot of any size streams in bounded memory."""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from globalstore.snapshots.digests import SENT, KnownDigests
from globalstore.snapshots.manifest import MANIFEST, FileEntry, Manifest, Sha256Behind
from globalstore.storage import Storage
from globalstore.storage.meta import Meta

__all__ = ["BLOCK", "CHUNK", "DB_DIR", "END", "padding", "tar_chunks"]

DB_DIR = "db"  # the RocksDB directory inside a store directory and inside a snapshot
CHUNK = 1 << 20
BLOCK = 512
END = bytes(2 * BLOCK)  # a tar's end-of-archive marker: two zero blocks


def tar_chunks(
    directory: Path, arcroot: str = DB_DIR, known: KnownDigests = SENT
) -> Iterator[bytes]:
    """The files of a flat directory (a RocksDB checkpoint) as an uncompressed tar stream, in
    chunks of at most 1 MiB, so a snapshot of any size streams in bounded memory. The files
    are hashed as they are sent, but for table files whose digest is `known` (sent before);
    the manifest follows them, then the end-of-archive marker."""
    files = []
    for path in sorted(directory.iterdir()):
        stat = path.stat()
        yield _header(f"{arcroot}/{path.name}", stat.st_size)
        sha256 = known.get(path, stat)
        with path.open("rb") as f, Sha256Behind() as digest:
            for chunk in _file_chunks(f, path, stat.st_size):
                if sha256 is None:
                    digest.update(chunk)
                yield chunk
            if sha256 is None:
                sha256 = digest.hexdigest()
                known.remember(path, stat, sha256)
        files.append(FileEntry(path.name, stat.st_size, sha256))
        yield padding(stat.st_size)
    manifest = Manifest.of(files, _checkpoint_meta(directory)).to_bytes()
    yield _header(MANIFEST, len(manifest))
    yield manifest + padding(len(manifest))
    yield END


def _file_chunks(f: IO[bytes], path: Path, size: int) -> Iterator[bytes]:
    """The `size` bytes of the open file `path`, a chunk at a time."""
    sent = 0
    while sent < size:
        chunk = f.read(min(CHUNK, size - sent))
        if not chunk:
            raise OSError(f"{path} shrank while being sent")
        sent += len(chunk)
        yield chunk


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(time.time())
    info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT)


def padding(size: int) -> bytes:
    """The zeros that fill a tar entry of `size` bytes up to a whole block."""
    return bytes(-size % BLOCK)


def _checkpoint_meta(checkpoint: Path) -> Meta:
    """The meta a checkpoint holds (its offsets, not the live store's: those moved on). Storage
    opens <path>/db, so a view directory names the checkpoint `db`; read-only mode writes
    nothing into the checkpoint."""
    with tempfile.TemporaryDirectory(prefix="globalstore-view-") as view:
        (Path(view) / DB_DIR).symlink_to(checkpoint.resolve(), target_is_directory=True)
        storage = Storage(view, read_only=True)
        try:
            return storage.read_meta()
        finally:
            storage.close()
