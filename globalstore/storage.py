"""The only module that touches rocksdict: lock, open, apply a batch with its offsets, read, scan.

On disk, in the store directory:
    globalstore.lock   fcntl lock held while open (one process per directory)
    RocksDB files      column family "default": key -> codec layout (header + value bytes)
                       column family "meta":    layout version, topic, offsets, counters

Every apply() is ONE WriteBatch holding the records and the next offset of each partition
they came from (contract 2), so after a crash the stored offsets never run ahead of the data.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rocksdict

from globalstore.codec import HEADER, LAYOUT_VERSION, value_format
from globalstore.config import RocksDBOptions
from globalstore.errors import StorageError, StoreLocked

log = logging.getLogger(__name__)

LOCK_FILE = "globalstore.lock"
META_CF = "meta"
_I64 = struct.Struct(">q")

# Meta column family keys.
K_LAYOUT = b"layout"
K_TOPIC = b"topic"
K_TOPIC_ID = b"topic_id"
K_COUNT = b"count"  # live keys; absent from a bulk restore until its recount ends
K_APPLIED_AT = b"applied_at"  # wall ms of the last batch (or heartbeat while in sync)
K_RESTORED_AT = b"restored_at"  # wall ms when the last restore reached its end offsets
K_MIGRATE_CURSOR = b"migrate.cursor"
_OFFSET_PREFIX = b"offset:"
# RocksDB open errors that mean "these files are damaged" (wipe and rebuild), as opposed to
# errors of the environment (permissions, disk full) that a rebuild would not fix.
_DAMAGE_SIGNS = ("Corruption", "No such file or directory", "Invalid argument")


def offset_key(partition: int) -> bytes:
    return _OFFSET_PREFIX + b"%d" % partition


class DamagedLayoutError(Exception):
    """The meta column family cannot be understood; the store must be rebuilt."""


@dataclass
class Meta:
    """What the meta column family says about the data beside it."""

    layout: int | None
    topic: str | None = None
    topic_id: str | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    count: int | None = None
    applied_at_ms: int | None = None
    restored_at_ms: int | None = None


@dataclass
class _Recount:
    """A keys-only count over one point-in-time iterator, plus the exact changes applied
    since that iterator was created."""

    keys: Iterator[bytes]
    counted: int = 0
    delta: int = 0


@dataclass
class Applied:
    """Result of one apply(): non-message events the caller must look at."""

    records: int = 0
    events: list[Any] = field(default_factory=list)


class _DirLock:
    """An fcntl lock on a file in the store directory; released when the process dies."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / LOCK_FILE
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self._fd)
            raise StoreLocked(
                f"store directory {directory} is in use by another process (pid {holder or '?'})"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode("ascii"), 0)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


class Storage:
    """A locked RocksDB database holding one topic's keys plus the meta column family."""

    def __init__(self, path: Path | str, options: RocksDBOptions | None = None) -> None:
        self.path = Path(path)
        self._options = options or RocksDBOptions()
        self._lock = _DirLock(self.path)
        self._state_lock = threading.Lock()
        self.positions: dict[int, int] = {}
        self.count: int | None = None
        self.layout: int | None = None
        self.restored_at_ms: int | None = None  # of the last completed restore, from meta
        self._recount: _Recount | None = None
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def _db_dir(self) -> str:
        return str(self.path / "db")

    def _open(self) -> None:
        try:
            self._db = self._open_rdict()
        except StoreLocked:
            raise
        except Exception as exc:
            if not any(sign in str(exc) for sign in _DAMAGE_SIGNS):
                raise StorageError(f"cannot open RocksDB in {self.path}: {exc}") from exc
            # RocksDB cannot make sense of its own files: the topic is the source of truth.
            log.warning("store %s is damaged (%s); wiping it to rebuild", self.path, exc)
            shutil.rmtree(self._db_dir(), ignore_errors=True)
            self._db = self._open_rdict()
        self._meta_cf = self._db.get_column_family_handle(META_CF)
        self._meta = self._db.get_column_family(META_CF)
        self._get = self._db.get

    def _open_rdict(self) -> rocksdict.Rdict:
        opts = self._options.to_options()
        try:
            return rocksdict.Rdict(self._db_dir(), opts, column_families={META_CF: opts})
        except Exception as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked(f"RocksDB in {self.path} is locked: {exc}") from exc
            raise

    def close(self) -> None:
        self._close_db()
        self._lock.release()

    def _close_db(self) -> None:
        # Every handle on the database must go before close(), or RocksDB keeps its LOCK.
        db = self.__dict__.pop("_db", None)
        self._recount = None  # its iterator is a handle on the database too
        for name in ("_meta", "_meta_cf", "_get"):
            self.__dict__.pop(name, None)
        if db is not None:
            db.close()

    def wipe(self) -> None:
        """Drop every key and all meta; the caller restores from the beginning."""
        self._close_db()
        shutil.rmtree(self._db_dir(), ignore_errors=True)
        self._open()
        with self._state_lock:
            self.positions = {}
            self.count = None
        self.layout = None
        self.restored_at_ms = None

    # -- meta --------------------------------------------------------------------------------

    def read_meta(self) -> Meta:
        """Parse the meta column family; DamagedLayoutError if any entry does not parse."""
        return _parse_meta(self._meta)

    def load(self, meta: Meta) -> None:
        """Adopt positions, count and last restore time from meta into memory."""
        with self._state_lock:
            self.positions = dict(meta.offsets)
            self.count = meta.count
        self.layout = meta.layout
        self.restored_at_ms = meta.restored_at_ms

    def mark_restored(self, now_ms: int) -> None:
        """Record that a restore reached its end offsets (kept across restarts for status)."""
        self.put_meta_int(K_RESTORED_AT, now_ms)
        self.restored_at_ms = now_ms

    def initialise(self, topic: str | None, topic_id: str | None) -> None:
        """Mark an empty store as current layout, for this topic."""
        wb = rocksdict.WriteBatch(raw_mode=True)
        wb.put(K_LAYOUT, str(LAYOUT_VERSION).encode(), self._meta_cf)
        wb.put(K_COUNT, _I64.pack(0), self._meta_cf)
        if topic is not None:
            wb.put(K_TOPIC, topic.encode(), self._meta_cf)
        if topic_id is not None:
            wb.put(K_TOPIC_ID, topic_id.encode(), self._meta_cf)
        self._write(wb)
        with self._state_lock:
            self.count = 0
        self.layout = LAYOUT_VERSION

    def put_meta(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self._meta.delete(key)
        else:
            self._meta.put(key, value)

    def put_meta_int(self, key: bytes, value: int) -> None:
        self._meta.put(key, _I64.pack(value))

    def get_meta(self, key: bytes) -> bytes | None:
        value: bytes | None = self._meta.get(key)
        return value

    def is_empty(self) -> bool:
        for _ in self._db.keys():  # noqa: SIM118 - Rdict.__iter__ fails in raw mode
            return False
        return True

    # -- writes ------------------------------------------------------------------------------

    def apply(self, messages: Sequence[Any], exact_count: bool, now_ms: int) -> Applied:
        """Write a consumed batch and the offsets it covers in one WriteBatch.

        exact_count=True looks up each distinct key of the batch (before writing it) to keep
        the live-key count exact: cheap for a small follow batch, but ~10 µs per key already
        on disk, so a bulk restore passes False, which marks the count unknown until a
        recount (see begin_recount) has caught up.
        """
        wb = rocksdict.WriteBatch(raw_mode=True)
        out = Applied()
        last: dict[int, int] = {}
        live = _fill(wb, messages, out, last)
        if not last:
            return out
        new_count = None
        if exact_count:
            get = self._get
            delta = sum(live.values()) - sum(get(k) is not None for k in live)
            if self._recount is not None:
                self._recount.delta += delta
            if self.count is not None:
                new_count = self.count + delta
        elif self._recount is not None:
            raise StorageError("a bulk apply cannot run while keys are being recounted")
        meta_cf = self._meta_cf
        for p, o in last.items():
            wb.put(offset_key(p), _I64.pack(o + 1), meta_cf)
        wb.put(K_APPLIED_AT, _I64.pack(now_ms), meta_cf)
        if new_count is None:
            wb.delete(K_COUNT, meta_cf)
        else:
            wb.put(K_COUNT, _I64.pack(new_count), meta_cf)
        self._write(wb)
        out.records = len(messages) - len(out.events)
        with self._state_lock:
            for p, o in last.items():
                self.positions[p] = o + 1
            self.count = new_count
        return out

    def begin_recount(self) -> None:
        """Start counting live keys over a point-in-time iterator. Call it from the writing
        thread, between applies; exact applies from then on add their change to the result."""
        ro = rocksdict.ReadOptions()
        ro.fill_cache(False)  # type: ignore[call-arg]  # the stub lacks the flag
        keys: Iterable[bytes] = self._db.keys(read_opt=ro)  # type: ignore[assignment]
        self._recount = _Recount(iter(keys))

    def recount_step(self, chunk: int) -> int | None:
        """Count up to `chunk` more keys; the exact count (also stored) once done, else None."""
        recount = self._recount
        if recount is None:
            raise StorageError("recount_step() without begin_recount()")
        seen = sum(1 for _ in itertools.islice(recount.keys, chunk))
        recount.counted += seen
        if seen == chunk:
            return None
        self._recount = None
        n = recount.counted + recount.delta
        self._meta.put(K_COUNT, _I64.pack(n))
        with self._state_lock:
            self.count = n
        return n

    def _write(self, wb: rocksdict.WriteBatch) -> None:
        try:
            self._db.write(wb)
        except Exception as exc:
            raise StorageError(f"RocksDB write failed in {self.path}: {exc}") from exc

    def write_values(
        self, pairs: Iterable[tuple[bytes, bytes]], meta: dict[bytes, bytes | None] | None = None
    ) -> None:
        """Rewrite values and meta entries in one batch (migrations, repairs)."""
        wb = rocksdict.WriteBatch(raw_mode=True)
        for key, value in pairs:
            wb.put(key, value)
        for key, mvalue in (meta or {}).items():
            if mvalue is None:
                wb.delete(key, self._meta_cf)
            else:
                wb.put(key, mvalue, self._meta_cf)
        self._write(wb)

    # -- reads -------------------------------------------------------------------------------

    def reader(self) -> Callable[[bytes], bytes | None]:
        """RocksDB's own get, for the query hot path (valid until close)."""
        get: Callable[[bytes], bytes | None] = self._get
        return get

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._get(key)
        return value

    def scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, raw value) with lower <= key < upper, over one point-in-time view.

        The RocksDB iterator is created before the first item is yielded, and an iterator
        sees the database as of its creation, so a scan never mixes two batches. Bounds are
        checked here: ReadOptions' iterate bounds are unreliable in rocksdict 0.3.29.
        """
        items: Iterable[tuple[bytes, bytes]]
        # A scan reads each block once: keep it out of the block cache that point gets use.
        ro = rocksdict.ReadOptions()
        ro.fill_cache(False)  # type: ignore[call-arg]  # the stub lacks the flag
        if reverse:
            items = self._db.items(backwards=True, from_key=upper, read_opt=ro)  # type: ignore[assignment]
        else:
            items = self._db.items(from_key=lower, read_opt=ro)  # type: ignore[assignment]
        if upper is None and (lower is None or not reverse):
            return iter(items)  # rocksdict's iterator already starts and ends right
        return _bounded(items, lower, upper, reverse)

    def keys_from(self, start: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, raw value) pairs from `start` on, for chunked migration."""
        out: list[tuple[bytes, bytes]] = []
        pairs: Iterable[tuple[bytes, bytes]] = self._db.items(from_key=start)  # type: ignore[assignment]
        for pair in pairs:
            if len(out) >= limit:
                break
            out.append(pair)
        return out

    def checkpoint(self, dest: Path) -> None:
        """A consistent copy of the database (data and meta, so its offsets) in `dest`, which
        must not exist: RocksDB flushes the memtables and hard-links the table files (copies
        them across file systems). Writers pause only for the flush."""
        try:
            rocksdict.Checkpoint(self._db).create_checkpoint(str(dest))
        except Exception as exc:
            raise StorageError(f"checkpoint of {self.path} into {dest} failed: {exc}") from exc

    def snapshot_state(self) -> tuple[dict[int, int], int | None]:
        with self._state_lock:
            return dict(self.positions), self.count


def _fill(
    wb: rocksdict.WriteBatch, messages: Sequence[Any], out: Applied, last: dict[int, int]
) -> dict[bytes, bool]:
    """The restore/follow hot loop, with as few Python operations per record as possible:
    fill `wb`, note the last offset per partition, and return {key: live after the batch}."""
    put, delete, pack, events = wb.put, wb.delete, HEADER.pack, out.events
    live: dict[bytes, bool] = {}
    for m in messages:
        if m.error() is not None:
            events.append(m)
            continue
        key = m.key()
        p = m.partition()
        o = m.offset()
        last[p] = o
        if key is None:
            continue  # a compacted topic cannot hold key-less records; ignore them
        value = m.value()
        if value is None:
            delete(key)
            live[key] = False
        else:
            # The record's own format header is kept, so a value written in a format newer
            # than this library is refused at query time instead of being misread.
            fmt = value_format(m.headers())
            put(key, pack(LAYOUT_VERSION, fmt, m.timestamp()[1], p, o) + value)
            live[key] = True
    return live


def _bounded(
    items: Iterable[tuple[bytes, bytes]], lower: bytes | None, upper: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    if reverse:
        for key, value in items:
            if upper is not None and key >= upper:
                continue  # seek_for_prev lands on `upper` itself when it exists
            if lower is not None and key < lower:
                return
            yield key, value
    else:
        for key, value in items:
            if upper is not None and key >= upper:
                return
            yield key, value


def _opt_str(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def _opt_i64(raw: bytes | None) -> int | None:
    return None if raw is None else int(_I64.unpack(raw)[0])


def inspect_meta(path: Path | str, options: RocksDBOptions | None = None) -> Meta:
    """Read the meta column family of the store at `path` without taking its lock: RocksDB's
    read-only mode sees the last written state even while another process runs the store."""
    db_dir = Path(path) / "db"
    if not (db_dir / "CURRENT").exists():
        raise StorageError(f"no store at {path}")
    opts = (options or RocksDBOptions()).to_options()
    try:
        db = rocksdict.Rdict(
            str(db_dir),
            opts,
            column_families={META_CF: opts},
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:
        raise StorageError(f"cannot open RocksDB in {path} read-only: {exc}") from exc
    try:
        return _parse_meta(db.get_column_family(META_CF))
    finally:
        db.close()


def _parse_meta(m: rocksdict.Rdict) -> Meta:
    """What a meta column family holds; DamagedLayoutError if any entry does not parse."""
    try:
        raw_layout = m.get(K_LAYOUT)
        meta = Meta(layout=None if raw_layout is None else int(raw_layout))
        meta.topic = _opt_str(m.get(K_TOPIC))
        meta.topic_id = _opt_str(m.get(K_TOPIC_ID))
        meta.count = _opt_i64(m.get(K_COUNT))
        meta.applied_at_ms = _opt_i64(m.get(K_APPLIED_AT))
        meta.restored_at_ms = _opt_i64(m.get(K_RESTORED_AT))
        entries: Iterable[tuple[bytes, bytes]] = m.items(from_key=_OFFSET_PREFIX)  # type: ignore[assignment]
        for key, value in entries:
            if not key.startswith(_OFFSET_PREFIX):
                break
            meta.offsets[int(key[len(_OFFSET_PREFIX) :])] = _I64.unpack(value)[0]
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise DamagedLayoutError(str(exc)) from exc
    return meta
