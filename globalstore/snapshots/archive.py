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
corrupted or hostile is refused, and the store restores from Kafka.

A peer's tar is read as hostile: only plain files (no links, devices, directories or sparse
files, whose holes would be written out in full); an extended header (PAX, GNU long name),
which tarfile reads whole into memory, at most _MAX_EXTENDED bytes, refused before it is
read; at most _MAX_FILES entries; and no more bytes than leave a twentieth of the store's
file system free (the manifest comes last, so it cannot bound what precedes it).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
import shutil
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Self, cast

from globalstore.config import RocksDBOptions
from globalstore.snapshots.digests import SENT, KnownDigests
from globalstore.snapshots.manifest import MANIFEST, FileEntry, Manifest, Sha256Behind, Staging
from globalstore.storage import Storage
from globalstore.storage.meta import Meta

log = logging.getLogger(__name__)

DB_DIR = "db"  # the RocksDB directory inside a store directory and inside a snapshot
TOKEN_ENV = "GLOBALSTORE_TOKEN"  # this server's bearer token; sent to peers without the next
PEER_TOKEN_ENV = "GLOBALSTORE_PEER_TOKEN"  # bearer token sent when fetching a snapshot
INSECURE_ENV = "GLOBALSTORE_INSECURE_SNAPSHOT"  # "1": fetch over http:// from another host
INSTALL_TIMEOUT_S = 600.0  # how long an install may take when the caller does not say
_CHUNK = 1 << 20
_BLOCK = 512
_END = bytes(2 * _BLOCK)  # a tar's end-of-archive marker: two zero blocks
_BUSY = 503  # what a peer answers when all its snapshot slots are taken (server/app.py)
_READ_TIMEOUT_S = 60.0  # the longest a silent peer may keep one read waiting
# A PAX header or GNU long name: a few names, sizes and times. tarfile reads it whole, and
# some of its regular expressions take time quadratic in its length (0.05 s at 4 KiB).
_MAX_EXTENDED = 4 << 10
_MAX_FILES = 50_000  # a manifest within its byte cap lists fewer (97+ bytes an entry)
_RESERVE = 20  # a download leaves 1/_RESERVE of the file system free for the stores beside
_PLAIN = (tarfile.REGTYPE, tarfile.AREGTYPE)
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
             tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)  # fmt: skip

Progress = Callable[[int], None]  # bytes received so far


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
    storage = Storage(store_path, rocksdb)
    try:
        storage.checkpoint(target)
        meta = storage.read_meta()  # nothing writes meanwhile: this process holds the lock
    finally:
        storage.close()
    files = [FileEntry.of_file(path) for path in sorted(target.iterdir())]
    (Path(dest) / MANIFEST).write_bytes(Manifest.of(files, meta).to_bytes())
    return target


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
        yield _padding(stat.st_size)
    manifest = Manifest.of(files, _checkpoint_meta(directory)).to_bytes()
    yield _header(MANIFEST, len(manifest))
    yield manifest + _padding(len(manifest))
    yield _END


def _file_chunks(f: IO[bytes], path: Path, size: int) -> Iterator[bytes]:
    """The `size` bytes of the open file `path`, a chunk at a time."""
    sent = 0
    while sent < size:
        chunk = f.read(min(_CHUNK, size - sent))
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


def _padding(size: int) -> bytes:
    return bytes(-size % _BLOCK)


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


def is_empty(store_path: str | Path) -> bool:
    """True when the directory holds no RocksDB database yet."""
    return not (Path(store_path) / DB_DIR / "CURRENT").exists()


class _ClosingError(Exception):
    """The install was stopped from outside (the store is closing)."""


class _Budget:
    """What may end an install early: its deadline, and `cancel` (set by close())."""

    def __init__(self, timeout: float, cancel: threading.Event | None) -> None:
        self.timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._cancel = cancel

    def check(self) -> None:
        if self._cancel is not None and self._cancel.is_set():
            raise _ClosingError("the store is closing")
        if time.monotonic() > self._deadline:
            raise TimeoutError(f"the install took longer than {self.timeout:g}s")

    def remaining(self) -> float:
        return max(0.001, self._deadline - time.monotonic())

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less if close() or the deadline comes first; then check()."""
        pause = min(seconds, self._deadline - time.monotonic())
        if pause > 0:
            if self._cancel is None:
                time.sleep(pause)
            else:
                self._cancel.wait(pause)
        self.check()


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
    began, budget = time.monotonic(), _Budget(timeout, cancel)
    with tempfile.TemporaryDirectory(prefix=_STAGING_PREFIX, dir=store) as tmp:
        staging = Staging(Path(tmp) / DB_DIR, budget.check)
        try:
            if _is_url(source):
                manifest = _fetch(str(source), staging, _Limits(store, budget, progress))
            else:
                manifest = _copy_directory(Path(source), staging)
            staging.verify(manifest)
            if not (staging.directory / "CURRENT").exists():
                raise ValueError("it holds no RocksDB database (db/CURRENT is missing)")
            _check_topic(Path(tmp), manifest)
            shutil.rmtree(store / DB_DIR, ignore_errors=True)  # an empty leftover, if any
            os.replace(staging.directory, store / DB_DIR)
        except _ClosingError as exc:
            log.info("snapshot %s not installed into %s: %s", source, store, exc)
            return False
        except Exception as exc:
            log.warning(
                "snapshot %s refused (%s: %s); restoring %s from Kafka instead",
                source,
                type(exc).__name__,
                exc,
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


class _Limits:
    """What bounds a download: the install's budget, and the bytes the store's file system
    can spare (fixed at the start); `progress` hears of the bytes received."""

    def __init__(self, store: Path, budget: _Budget, progress: Progress | None) -> None:
        usage = shutil.disk_usage(store)
        self.max_bytes = max(0, usage.free - usage.total // _RESERVE)
        self.budget = budget
        self.progress = progress


def _fetch(url: str, staging: Staging, limits: _Limits) -> Manifest:
    _check_transport(url)
    request = urllib.request.Request(url)
    token = os.environ.get(PEER_TOKEN_ENV) or os.environ.get(TOKEN_ENV)
    if token:
        if _insecure(url):
            log.warning("sending the bearer token to %s over plain http (%s): anyone on the "
                        "path can read it", url, INSECURE_ENV)  # fmt: skip
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(_SameOriginRedirects())
    budget = limits.budget
    while True:
        try:
            response = opener.open(request, timeout=min(_READ_TIMEOUT_S, budget.remaining()))
        except urllib.error.HTTPError as exc:
            if exc.code != _BUSY:
                raise
            # Every snapshot slot of the peer is taken (--max-snapshots): a fleet booting at
            # once queues for them instead of all replaying from Kafka.
            delay = _retry_after(exc.headers.get("Retry-After"))
            exc.close()
            log.info("snapshot peer %s is busy; asking again in %gs", url, delay)
            budget.wait(delay)
            continue
        with contextlib.closing(response):
            return _read_tar(_Received(response, limits), staging)


def _check_transport(url: str) -> None:
    """ValueError for plain http to another host, unless INSECURE_ENV allows it: anyone on
    the path could read the token and send a snapshot of their own, which the manifest (a
    list of checksums from the same peer) cannot tell from the real one."""
    if _insecure(url) and os.environ.get(INSECURE_ENV) != "1":
        raise ValueError(
            f"{url} is plain http to another host: use https://, or set {INSECURE_ENV}=1 to "
            "accept that anyone on the path can read the token and replace the snapshot"
        )


def _insecure(url: str) -> bool:
    """Plain http to another host (on loopback, no one else is on the path)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        loopback = False
    return parts.scheme == "http" and not loopback


def _retry_after(header: str | None) -> float:
    """Seconds a 503's Retry-After asks for (a number of seconds; 5 when absent or a date),
    at most a minute."""
    try:
        return min(60.0, max(0.0, float(header or "")))
    except ValueError:
        return 5.0


def _read_tar(stream: _Received, staging: Staging) -> Manifest:
    """Extract the db/ files into staging and return the manifest, which must be the last
    entry, followed by the end-of-archive marker and nothing else."""
    manifest: Manifest | None = None
    end = 0  # where the manifest's data ends
    # tarfile's stream mode reads 10 KB at a time by default: a 4 GB snapshot cost ~400k
    # reads, each through _Received and a join, which took more CPU than the hashing.
    with tarfile.open(
        fileobj=cast(IO[bytes], stream), mode="r|", bufsize=_CHUNK, tarinfo=_Header
    ) as tar:
        for count, member in enumerate(tar, start=1):
            if manifest is not None:
                raise ValueError(f"entry {member.name!r} after the manifest")
            if count > _MAX_FILES:
                raise ValueError(f"it has more than {_MAX_FILES} entries")
            # Nothing is extracted by tarfile: only plain files are read, and Staging
            # writes each under a plain name it checks, so no link or path can escape.
            data = tar.extractfile(member) if _is_plain(member) else None
            if data is None:
                raise ValueError(f"entry {member.name!r} is not a regular file")
            if member.name == MANIFEST:
                manifest = Manifest.parse(data.read(Manifest.MAX_BYTES + 1))
                end = member.offset_data + member.size + len(_padding(member.size))
            elif member.name.startswith(f"{DB_DIR}/"):
                staging.add(member.name.removeprefix(f"{DB_DIR}/"), data)
            else:
                raise ValueError(f"unexpected entry {member.name!r} in the snapshot")
    if manifest is None:
        raise ValueError("the snapshot ends before its manifest: it was cut short")
    stream.drain(end + len(_END))
    if stream.received != end + len(_END) or stream.tail != _END:
        raise ValueError("the end-of-archive marker is missing: the snapshot was cut short")
    return manifest


def _is_plain(member: tarfile.TarInfo) -> bool:
    """A regular file whose data is its bytes: a sparse one's holes would be written out."""
    return member.type in _PLAIN and member.sparse is None


class _Header(tarfile.TarInfo):
    """A tar header, refused as soon as it is parsed, before tarfile reads what follows it,
    unless it is of a plain file or an extended header small enough to be read whole."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        header = super().frombuf(buf, encoding, errors)
        if header.type not in _PLAIN + _EXTENDED:
            raise ValueError(f"entry {header.name!r} is not a regular file")
        if header.type in _EXTENDED and header.size > _MAX_EXTENDED:
            raise ValueError(f"an extended header of {header.size} bytes (at most "
                             f"{_MAX_EXTENDED})")  # fmt: skip
        return header

    def _proc_gnusparse_10(self, *_: object) -> None:
        # tarfile would read a sparse map of any length from the data that follows, into
        # memory; such a file is refused anyway. (tarfile's own method: not in its stubs.)
        raise ValueError("a sparse file")


class _Received:
    """The response as tarfile reads it: counts the bytes, keeps the last 1 KiB (to see the
    end-of-archive marker), reports progress, and stops at the install's deadline, at close()
    or past the bytes the file system can spare."""

    def __init__(self, raw: io.BufferedIOBase, limits: _Limits) -> None:
        self._raw = raw
        self._limits = limits
        self.received = 0
        self.tail = b""

    def read(self, size: int) -> bytes:
        limits = self._limits
        limits.budget.check()
        # read1: what one receive brings, so the deadline is checked while a slow peer
        # trickles a chunk of tarfile's size, not only after the whole chunk arrived.
        data = self._raw.read1(size)
        self.received += len(data)
        if self.received > limits.max_bytes:
            raise ValueError(f"it is larger than the {limits.max_bytes} bytes the file "
                             "system can spare")  # fmt: skip
        self.tail = (self.tail + data[-len(_END) :])[-len(_END) :]
        if limits.progress is not None:
            limits.progress(self.received)
        return data

    def drain(self, limit: int) -> None:
        """Read to the end of the response; ValueError once past `limit` bytes in all (also
        when tarfile's read-ahead already took those bytes: then nothing is left to read)."""
        while self.received <= limit and self.read(_CHUNK):
            pass
        if self.received > limit:
            raise ValueError("data follows the end of the snapshot")


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but sends the token only to the origin (scheme, host, port) it
    was meant for: urllib would carry the Authorization header anywhere."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
        headers: Any, newurl: str,
    ) -> urllib.request.Request | None:  # fmt: skip
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        _check_transport(new.full_url)  # nor may a redirect lead to plain http elsewhere
        if _origin(new.full_url) != _origin(req.full_url):
            if new.has_header("Authorization"):
                log.warning("snapshot redirected to %s: not sending the token there", newurl)
            new.remove_header("Authorization")
        return new


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default
