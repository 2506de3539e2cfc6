"""Snapshots: a consistent RocksDB checkpoint of a store, as a directory or a tar stream, and
the installation of one into an empty store directory.

A checkpoint holds the meta column family beside the data, so it carries its own offsets,
topic, topic id and layout (contract 2): a new instance opens a copy and follows from there.
Installing only puts the files in place; the restore plan that runs next at start() checks
them like any store it finds (topic and topic id, layout, offsets inside the topic's range,
younger than delete.retention.ms) and rebuilds from Kafka with a WARNING if they do not fit.

    <snapshot dir>/db/...      what `globalstore snapshot create DIR` writes
    tar stream: db/...         what GET /v1/snapshot sends (no compression: SSTs are compressed)
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tarfile
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from globalstore.config import RocksDBOptions
from globalstore.storage import Storage

log = logging.getLogger(__name__)

DB_DIR = "db"  # the RocksDB directory inside a store directory and inside a snapshot
TOKEN_ENV = "GLOBALSTORE_TOKEN"  # bearer token sent when fetching a snapshot over HTTP
_CHUNK = 1 << 20
_BLOCK = 512

Progress = Callable[[int], None]  # bytes received so far


_CHECKPOINT_PREFIX = "checkpoint-"


def checkpoint_dir(store_path: Path) -> Path:
    """A fresh path for a checkpoint beside the store's database (same file system, so RocksDB
    hard-links the table files instead of copying them). The caller removes it."""
    return store_path / f"{_CHECKPOINT_PREFIX}{uuid.uuid4().hex[:12]}"


def remove_stale_checkpoints(store_path: Path) -> None:
    """Remove checkpoints a previous process left behind (killed while sending one): their
    hard links would keep old table files on disk. Call it while holding the store."""
    for leftover in store_path.glob(f"{_CHECKPOINT_PREFIX}*"):
        log.info("removing stale checkpoint %s", leftover)
        shutil.rmtree(leftover, ignore_errors=True)


def create(store_path: str | Path, dest: str | Path, rocksdb: RocksDBOptions | None = None) -> Path:
    """Write a snapshot of the (not running) store at `store_path` into `dest`/db. StoreLocked
    if another process runs the store: ask that one for GET /v1/snapshot instead."""
    target = Path(dest) / DB_DIR
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    Path(dest).mkdir(parents=True, exist_ok=True)
    storage = Storage(store_path, rocksdb)
    try:
        storage.checkpoint(target)
    finally:
        storage.close()
    return target


def tar_chunks(directory: Path, arcroot: str = DB_DIR) -> Iterator[bytes]:
    """The files of a flat directory (a RocksDB checkpoint) as an uncompressed tar stream, in
    chunks of at most 1 MiB, so a snapshot of any size streams in bounded memory."""
    for path in sorted(directory.iterdir()):
        info = tarfile.TarInfo(f"{arcroot}/{path.name}")
        stat = path.stat()
        info.size = stat.st_size
        info.mtime = int(stat.st_mtime)
        info.mode = 0o644
        yield info.tobuf(tarfile.PAX_FORMAT)
        with path.open("rb") as f:
            sent = 0
            while sent < info.size:
                chunk = f.read(min(_CHUNK, info.size - sent))
                if not chunk:
                    raise OSError(f"{path} shrank while being sent")
                sent += len(chunk)
                yield chunk
        if info.size % _BLOCK:
            yield b"\0" * (_BLOCK - info.size % _BLOCK)
    yield b"\0" * (2 * _BLOCK)


def is_empty(store_path: str | Path) -> bool:
    """True when the directory holds no RocksDB database yet."""
    return not (Path(store_path) / DB_DIR / "CURRENT").exists()


def install(source: str | Path, store_path: str | Path, progress: Progress | None = None) -> bool:
    """Put the snapshot at `source` (a snapshot directory, or an http(s) URL of GET
    /v1/snapshot) in place as the store at `store_path`, if that store is empty. Returns True
    when installed; on any failure logs a WARNING saying why and returns False, and the store
    restores from Kafka as if no snapshot had been given."""
    store = Path(store_path)
    if not is_empty(store):
        log.info("store %s is not empty: snapshot %s not used", store, source)
        return False
    store.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="snapshot-", dir=store) as tmp:
        staged = Path(tmp) / DB_DIR
        try:
            if _is_url(source):
                _fetch(str(source), Path(tmp), progress)
            else:
                shutil.copytree(Path(source) / DB_DIR, staged)
            if not (staged / "CURRENT").exists():
                raise ValueError("it holds no RocksDB database (db/CURRENT is missing)")
            shutil.rmtree(store / DB_DIR, ignore_errors=True)  # an empty leftover, if any
            os.replace(staged, store / DB_DIR)
        except Exception as exc:
            log.warning(
                "snapshot %s refused (%s: %s); restoring %s from Kafka instead",
                source,
                type(exc).__name__,
                exc,
                store,
            )
            return False
    log.info("installed snapshot %s into %s in %.2fs", source, store, time.monotonic() - began)
    return True


def _is_url(source: str | Path) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def _fetch(url: str, into: Path, progress: Progress | None) -> None:
    request = urllib.request.Request(url)
    token = os.environ.get(TOKEN_ENV)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with contextlib.closing(urllib.request.urlopen(request, timeout=60)) as response:
        stream: Any = _Counting(response, progress) if progress else response
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                if not member.isfile() or not member.name.startswith(f"{DB_DIR}/"):
                    raise ValueError(f"unexpected entry {member.name!r} in the snapshot")
                tar.extract(member, into, filter="data")


class _Counting:
    """A read-only stream that reports how many bytes went through."""

    def __init__(self, raw: IO[bytes], progress: Progress) -> None:
        self._raw = raw
        self._progress = progress
        self.received = 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.received += len(data)
        self._progress(self.received)
        return data
