"""Snapshots: a consistent RocksDB checkpoint of a store, as a directory or a tar stream, and
the installation of one into an empty store directory.

A checkpoint holds the meta column family beside the data, so it carries its own offsets,
topic, topic id and layout (contract 2): a new instance opens a copy and follows from there.
Installing only puts the files in place; the restore plan that runs next at start() checks
them like any store it finds (topic and topic id, layout, offsets inside the topic's range,
younger than delete.retention.ms) and rebuilds from Kafka with a WARNING if they do not fit.

    <snapshot dir>/db/...           what `globalstore snapshot create DIR` writes
    <snapshot dir>/manifest.json    every file's name, size and SHA-256, topic, offsets
    tar stream: db/..., then manifest.json, then the end-of-archive marker
                                    what GET /v1/snapshot sends (no compression: SSTs are)

Nothing is moved into place before every file is there with the size and hash the manifest
gives, nothing else is there, its database names the topic, topic id and offsets the
manifest gives, and (in a tar) the end-of-archive marker arrived: a snapshot cut short,
corrupted or hostile is refused, and the store restores from Kafka. The stream is made in
stream.py and fetched (from a peer, read as hostile) in fetch.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from globalstore import tracing
from globalstore.config import RocksDBOptions
from globalstore.snapshots.fetch import Budget, InstallCancelled, Limits, Progress, fetch
from globalstore.snapshots.manifest import MANIFEST, FileEntry, Manifest, Staging
from globalstore.snapshots.stream import DB_DIR
from globalstore.storage import Storage

__all__ = [
    "INSTALL_TIMEOUT_S",
    "checkpoint_dir",
    "create",
    "install",
    "is_empty",
    "remove_stale_checkpoints",
]

log = logging.getLogger(__name__)

INSTALL_TIMEOUT_S = 600.0  # how long an install may take when the caller does not say


_CHECKPOINT_PREFIX = "checkpoint-"
_STAGING_PREFIX = "snapshot-"


def checkpoint_dir(store_path: Path) -> Path:
    """A fresh path for a checkpoint beside the store's database (same file system, so RocksDB
    hard-links the table files instead of copying them). The caller removes it."""
    return store_path / f"{_CHECKPOINT_PREFIX}{uuid.uuid4().hex[:12]}"


def remove_stale_checkpoints(store_path: Path) -> None:
    """Remove what a previous process left behind when killed: checkpoints it was sending
    (their hard links would keep old table files on disk) and snapshots it was installing.
    Call it while holding the store's lock."""
    for prefix in (_CHECKPOINT_PREFIX, _STAGING_PREFIX):
        for leftover in store_path.glob(f"{prefix}*"):
            log.info("removing stale %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


def create(store_path: str | Path, dest: str | Path, rocksdb: RocksDBOptions | None = None) -> Path:
    """Write a snapshot of the (not running) store at `store_path` into `dest`/db, with its
    manifest beside. StoreLocked if another process runs the store: ask that one for GET
    /v1/snapshot instead."""
    target = Path(dest) / DB_DIR
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    Path(dest).mkdir(parents=True, exist_ok=True)
    with tracing.phase("globalstore.snapshot.create", {"globalstore.path": str(store_path)}):
        storage = Storage(store_path, rocksdb)
        try:
            storage.checkpoint(target)
            meta = storage.read_meta()  # nothing writes meanwhile: this process holds the lock
        finally:
            storage.close()
        files = [FileEntry.of_file(path) for path in sorted(target.iterdir())]
        (Path(dest) / MANIFEST).write_bytes(Manifest.of(files, meta).to_bytes())
    return target


def is_empty(store_path: str | Path) -> bool:
    """True when the directory holds no RocksDB database yet."""
    return not (Path(store_path) / DB_DIR / "CURRENT").exists()


def install(
    source: str | Path,
    store_path: str | Path,
    progress: Progress | None = None,
    *,
    timeout: float = INSTALL_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> bool:
    """Put the snapshot at `source` (a snapshot directory, or an http(s) URL of GET
    /v1/snapshot) in place as the store at `store_path`, if that store is empty. Call it
    while holding the store's lock. Returns True when installed; on any failure, after
    `timeout` seconds, or once `cancel` is set, logs why and returns False, and the store
    restores from Kafka as if no snapshot had been given."""
    store = Path(store_path)
    if not is_empty(store):
        log.info("store %s is not empty: snapshot %s not used", store, source)
        return False
    store.mkdir(parents=True, exist_ok=True)
    began, budget = time.monotonic(), Budget(timeout, cancel)
    with tempfile.TemporaryDirectory(prefix=_STAGING_PREFIX, dir=store) as tmp:
        staging = Staging(Path(tmp) / DB_DIR, budget.check)
        try:
            if _is_url(source):
                manifest = fetch(str(source), staging, Limits(store, budget, progress))
            else:
                manifest = _copy_directory(Path(source), staging)
            staging.verify(manifest)
            if not (staging.directory / "CURRENT").exists():
                raise ValueError("it holds no RocksDB database (db/CURRENT is missing)")
            _check_topic(Path(tmp), manifest)
            shutil.rmtree(store / DB_DIR, ignore_errors=True)  # an empty leftover, if any
            os.replace(staging.directory, store / DB_DIR)
        except InstallCancelled as exc:
            log.info("snapshot %s not installed into %s: %s", source, store, str(exc))
            return False
        except Exception as exc:
            log.warning(
                "snapshot %s refused (%s: %s); restoring %s from Kafka instead",
                source,
                type(exc).__name__,
                str(exc),
                store,
            )
            return False
    log.info(
        "installed snapshot %s (topic %s, offsets %s) into %s in %.2fs",
        source,
        manifest.topic,
        manifest.offsets,
        store,
        time.monotonic() - began,
    )
    return True


def _check_topic(root: Path, manifest: Manifest) -> None:
    """ValueError unless the database at `root`/db names a topic and topic id, those its
    manifest gives, at the offsets it gives: the restore plan compares them with the store's
    topic and the cluster's id, and can tell nothing from a database that names none."""
    storage = Storage(root, read_only=True)
    try:
        meta = storage.read_meta()
    finally:
        storage.close()
    if not meta.topic or not meta.topic_id:
        raise ValueError("its database names no topic or no topic id")
    if (meta.topic, meta.topic_id) != (manifest.topic, manifest.topic_id):
        raise ValueError(
            f"its database holds topic {meta.topic!r} (id {meta.topic_id}), its manifest "
            f"says {manifest.topic!r} (id {manifest.topic_id})"
        )
    if meta.offsets != manifest.offsets:
        raise ValueError(
            f"its database is at offsets {meta.offsets}, its manifest says {manifest.offsets}"
        )


def _is_url(source: str | Path) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def _copy_directory(source: Path, staging: Staging) -> Manifest:
    """Copy `source`/db into the staging directory, each file hashed as it is copied."""
    manifest = Manifest.parse((source / MANIFEST).read_bytes())
    for path in sorted((source / DB_DIR).iterdir()):
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{path} is not a regular file")
        with path.open("rb") as f:
            staging.add(path.name, f)
    return manifest
