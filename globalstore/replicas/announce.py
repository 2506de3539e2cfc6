"""How the process that writes a store wakes the processes that read it (shared_store.py).

The writer raises a counter in shared memory (<store>/readers/batches, a mapped file) after
every batch it applies: a reader compares it with the value it last caught up to on each
query, for the price of one memory read, so the thread that queries catches up itself and
never waits for another thread to get the GIL back (docs/performance.md, "Following and
freshness under load").

Each reader binds a Unix datagram socket at <store>/readers/<id>/wake.sock. After every batch
the writer applies, after a heal moves the live copy, and once a second while nothing
happens, the writer sends each of those sockets one datagram: a WriterNote, which says who
writes, where the live copy is, how far it has applied the topic and how far the topic goes.
The writer lists the readers' directory once a second (the heartbeat), never per batch, so
a writer without readers makes no system call for them on its follower's hot path.

A send never blocks the writer: a reader whose queue is full misses one wake-up and catches
up at the next. A socket nobody listens on any more belongs to a reader that died without
closing: its directory is removed.

A datagram is data from outside until it passes two checks: the kernel says it was sent by a
process of this user (SO_PASSCRED), and it parses as a note whose every field has its type,
size and a known value (the live copy a plain name inside the store). Anything else is
counted and dropped. readers/, each reader's directory and its socket are owner-only
whatever the umask, and the counter file is never opened through a symlink.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import math
import mmap
import os
import re
import shutil
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from globalstore.errors import ConfigurationError
from globalstore.follow.delays import FollowedBatch
from globalstore.status import State

__all__ = [
    "ACCEPTS_APPLIED",
    "BATCHES",
    "HEARTBEAT_S",
    "MAX_SOCKET_PATH",
    "READERS",
    "WAKE_SOCKET",
    "Announcer",
    "BatchCounter",
    "WakeSocket",
    "WriterNote",
    "new_writer_id",
]

log = logging.getLogger(__name__)

READERS = "readers"  # the directory, inside the store's, where readers register
WAKE_SOCKET = "wake.sock"
# In a reader's directory, made before its socket: it decodes notes that list the batches
# applied. A reader without it (an older version) gets notes without it: its decoder would
# refuse them, and it would stop following a newer writer.
ACCEPTS_APPLIED = "accepts-applied"
BATCHES = "batches"  # in READERS: the writer's batch counter
HEARTBEAT_S = 1.0  # a note at least this often, so readers can tell a quiet writer from none
# A Unix socket's path is limited to 107 bytes (108 with its NUL) on Linux, 103 on macOS.
MAX_SOCKET_PATH = 103


@dataclass(frozen=True)
class WriterNote:
    """What a writer tells its readers, all of one instant."""

    writer: str  # this writer's incarnation: another id means a restart, maybe a rebuild
    live: str  # the live copy's directory, relative to the store's ("." or "rebuild")
    state: str  # State.value of the writer's store
    ready: bool  # it has completed a restore: its live copy can be read
    positions: Mapping[int, int]  # next offset it has applied, per partition
    high: Mapping[int, int]  # the topic's end offsets as it last knew them
    sent_at: float  # wall-clock seconds
    # The batches it followed last, oldest first (none yet, or a writer of a version before
    # them: empty): a reader counts their records' delay once it shows them.
    applied: tuple[FollowedBatch, ...] = ()

    def encode(self, *, applied: bool = True) -> bytes:
        """The note as compact JSON bytes, as readers decode it; applied=False leaves the
        batches out, for a reader of a version before them (whose decoder refuses a field
        it does not know: ACCEPTS_APPLIED says which readers know it)."""
        body = {**self.__dict__, "positions": dict(self.positions), "high": dict(self.high)}
        if body.pop("applied") and applied:
            body["applied"] = [list(batch) for batch in self.applied]
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> WriterNote:
        """The note in `data`; ValueError unless it has every field (`applied` may be
        missing: a writer of a version before it) and nothing else, each of its type, within
        its size and, for the live copy and the state, a value a writer sends. (json may also
        raise RecursionError on deep nesting.)"""
        body = json.loads(data)
        if not isinstance(body, dict) or body.keys() - {"applied"} != _NOTE_FIELDS:
            raise ValueError("not the fields of a writer's note")
        return cls(
            writer=_matching(body["writer"], _WRITER_ID, "writer"),
            live=_matching(body["live"], _LIVE_COPY, "live"),
            state=_matching(body["state"], _STATE, "state"),
            ready=_flag(body["ready"]),
            positions=_offsets(body["positions"], "positions"),
            high=_offsets(body["high"], "high"),
            sent_at=_seconds(body["sent_at"]),
            applied=_batches(body["applied"]) if "applied" in body else (),
        )


_NOTE_FIELDS = frozenset(field.name for field in fields(WriterNote)) - {"applied"}
_WRITER_ID = re.compile(r"[0-9a-f-]{1,64}")  # new_writer_id()'s
# "." (the store's own directory) or one plain name in it: no separator, no "..", not absolute.
_LIVE_COPY = re.compile(r"\.|[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_STATE = re.compile("|".join(re.escape(state.value) for state in State))
# ASCII digits only: int() also takes " 1", "1_0" and other scripts' digits.
_PARTITION = re.compile(r"[0-9]{1,10}")
_MAX_OFFSET = (1 << 63) - 1
_MAX_BATCHES = 256  # a later writer may list more than RECENT_BATCHES


def _matching(value: object, pattern: re.Pattern[str], name: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        # The value is not quoted: a forged one may be a megabyte of text meant for logs.
        raise ValueError(f"{name} is not a string matching {pattern.pattern}")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("ready is not true or false")
    return value


def _offsets(value: object, name: str) -> dict[int, int]:
    if not isinstance(value, dict):
        raise ValueError(f"{name} is not an object")
    offsets = {}
    for partition, offset in value.items():
        if not _PARTITION.fullmatch(partition) or type(offset) is not int:
            raise ValueError(f"{name} is not partition numbers to offsets")
        if not 0 <= offset <= _MAX_OFFSET:
            raise ValueError(f"{name} has an offset out of range")
        offsets[int(partition)] = offset
    return offsets


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("sent_at is not a finite number")
    return float(value)


def _batches(value: object) -> tuple[FollowedBatch, ...]:
    if not isinstance(value, list) or len(value) > _MAX_BATCHES:
        raise ValueError(f"applied is not a list of at most {_MAX_BATCHES} batches")
    for batch in value:
        if (
            not isinstance(batch, list)
            or len(batch) != len(FollowedBatch._fields)
            or any(type(item) is not int or not 0 <= item <= _MAX_OFFSET for item in batch)
        ):
            raise ValueError("applied has a batch that is not three whole numbers in range")
    return tuple(FollowedBatch(*batch) for batch in value)


def new_writer_id() -> str:
    """An id no other incarnation of a writer on this host has had."""
    return f"{os.getpid()}-{time.time_ns():x}"


class BatchCounter:
    """An 8-byte counter in a mapped file, shared by the writer (raises it) and its readers
    (compare it). An aligned 8-byte load or store is atomic on every CPU Python runs on."""

    def __init__(self, store_path: Path, *, create: bool) -> None:
        """create=True (the writer) makes the file if it is missing; a reader's open fails
        with FileNotFoundError until a writer has made it."""
        path = store_path / READERS / BATCHES
        if create:
            _private_directory(path.parent)
        # Never through a symlink: the writer would raise 8 bytes of whatever file it names.
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            _check_owned(fd, path, stat.S_ISREG)
            if os.fstat(fd).st_size < 8:
                # Written, not truncated: the disk must hold the page now, or a full disk
                # would kill the process (SIGBUS) at the first raise_() through the map.
                os.pwrite(fd, bytes(8), 0)
            self._map = mmap.mmap(fd, 8)  # shared: every process sees each store at once
        finally:
            os.close(fd)
        self._cell: ctypes.c_uint64 | None = ctypes.c_uint64.from_buffer(self._map)

    @property
    def value(self) -> int:
        """The batches applied so far; 0 once closed."""
        cell = self._cell
        return 0 if cell is None else cell.value

    def raise_(self) -> None:
        """One more batch applied (the writer's side; one thread at a time)."""
        if self._cell is not None:
            self._cell.value += 1

    def close(self) -> None:
        """Drop the counter and unmap the file (later, if a query on another thread still reads
        it)."""
        self._cell = None  # the map cannot close while a ctypes view holds it
        with contextlib.suppress(BufferError):  # a query on another thread still holds
            self._map.close()  # the view: the map is unmapped when that lets go of it


class Announcer:
    """The writer's side: wake() after every change; a thread of its own sends heartbeats."""

    def __init__(self, store_path: Path, note: Callable[[], WriterNote | None]) -> None:
        """`note()` describes the writer now (None: nothing to say, it is closing); it is
        called on the thread that calls wake() and on the heartbeat thread."""
        self._readers_dir = store_path / READERS
        self._note = note
        self._batches = BatchCounter(store_path, create=True)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._sending = threading.Lock()
        self._seen_mtime = -1
        self._readers: list[Path] = []
        self._know_applied: set[Path] = set()  # readers with ACCEPTS_APPLIED
        self.relist()  # readers that registered before this writer started
        self._stopped = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"globalstore-announce-{store_path.name}", daemon=True
        )
        self._heartbeat.start()

    def wake(self) -> None:
        """Raise the batch counter; send the current note to every reader registered when the
        readers were last listed (relist()), if any. It runs after every batch on the
        follower's thread: it makes no system call while no reader is registered (a stat of
        the readers' directory each batch handed the GIL over each batch)."""
        with self._sending:
            self._batches.raise_()
        if self._readers:
            note = self._note()
            if note is not None:
                self._send(note)

    def relist(self) -> None:
        """List the registered readers again if their directory changed. The heartbeat does
        it every beat, so a reader that registers hears from the writer within a beat."""
        try:
            mtime = os.stat(self._readers_dir).st_mtime_ns
        except FileNotFoundError:
            mtime = 0
        if mtime != self._seen_mtime:
            self._seen_mtime = mtime
            self._readers = _listed(self._readers_dir)
        # Also when the listing is unchanged: a reader makes its marker after its directory.
        # A stat per reader that has none (an older version's) per call: once a second.
        self._know_applied = {
            reader
            for reader in self._readers
            if reader in self._know_applied or (reader / ACCEPTS_APPLIED).exists()
        }

    def close(self, last: WriterNote | None = None) -> None:
        """Stop the heartbeat; send `last` (the writer's farewell) to every reader."""
        self._stopped.set()
        self._heartbeat.join()
        self.relist()
        if last is not None and self._readers:
            self._send(last)
        self._socket.close()
        self._batches.close()

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_S):
            try:
                self.relist()
                self.wake()
            except Exception:  # a heartbeat must never end: log and go on
                log.exception("waking the readers of %s failed", self._readers_dir.parent)

    def _send(self, note: WriterNote) -> None:
        data, older = note.encode(), note.encode(applied=False)
        with self._sending:
            for reader in list(self._readers):
                try:
                    with _address(reader / WAKE_SOCKET) as address:
                        self._socket.sendto(
                            data if reader in self._know_applied else older, address
                        )
                except (BlockingIOError, FileNotFoundError):
                    pass  # queue full (it is behind anyway), or still setting up
                except ConnectionRefusedError:
                    self._forget(reader)
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise

    def _forget(self, reader: Path) -> None:
        log.info("reader %s of %s is gone: removing it", reader.name, reader.parent.parent)
        shutil.rmtree(reader, ignore_errors=True)
        with contextlib.suppress(ValueError):
            self._readers.remove(reader)


def _listed(readers_dir: Path) -> list[Path]:
    try:
        with os.scandir(readers_dir) as entries:
            # Not through a symlink: it would aim the notes at some other socket.
            return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _private_directory(path: Path) -> None:
    """Make `path` a directory only this user can enter, whatever the umask, also when an
    older version made it with the umask's modes (its parents get the umask's). OSError if it
    is a symlink or another user's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_owned(fd, path, stat.S_ISDIR)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _check_owned(fd: int, path: Path, kind: Callable[[int], bool]) -> None:
    """PermissionError unless the open `fd` is of the `kind` expected and this user's."""
    info = os.fstat(fd)
    if not kind(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(
            f"{path} is not a {kind.__name__.removeprefix('S_IS').lower()} of this user "
            f"(uid {os.geteuid()}): it may have been planted; remove it"
        )


class WakeSocket:
    """The reader's side: a directory of its own under <store>/readers, with its socket."""

    def __init__(self, store_path: Path, reader_id: str) -> None:
        """FileExistsError if a reader with this id is registered."""
        self.directory = store_path / READERS / reader_id
        self.refused = 0  # datagrams that were not a note of this user's writer
        _private_directory(self.directory.parent)
        self.directory.mkdir(0o700)  # FileExistsError: the id is taken
        _private_directory(self.directory)  # 0700 also under a umask that takes owner bits
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        # The kernel then attaches the sender's uid to every datagram (Linux: SO_PASSCRED).
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        os.fchmod(self._socket.fileno(), 0o600)  # before bind: the file is made with it
        (self.directory / ACCEPTS_APPLIED).touch(0o600)  # before a note can arrive
        with _address(self.directory / WAKE_SOCKET) as address:
            self._socket.bind(address)

    def receive(self, timeout: float) -> WriterNote | None:
        """The newest writer's note that arrives within `timeout` (older queued ones are
        dropped), or None. Datagrams that are not are counted in `refused`."""
        sock = self._socket
        sock.settimeout(timeout)
        try:
            note = self._believed()
        except TimeoutError:
            return None
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                note = self._believed() or note
        return note

    def _believed(self) -> WriterNote | None:
        """The next datagram as a note, if it is one from a process of this user."""
        data, ancillary, flags, _ = self._socket.recvmsg(_MAX_NOTE, _CREDENTIALS_SPACE)
        try:
            if _sender_uid(ancillary) != os.geteuid():
                raise ValueError("its sender is not a process of this user")
            if flags & socket.MSG_TRUNC:
                raise ValueError(f"it is longer than {_MAX_NOTE} bytes")
            return WriterNote.decode(data)
        except Exception as exc:  # RecursionError too: whatever it is, the reader goes on
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # 1st, 2nd, 4th...: a flood, not a log
                log.warning("refused %d datagram(s) on %s that are not the writer's note; "
                            "the last: %s", self.refused, self.directory, exc)  # fmt: skip
            return None

    def close(self) -> None:
        """Close the socket and remove the reader's directory."""
        self._socket.close()
        shutil.rmtree(self.directory, ignore_errors=True)


_MAX_NOTE = 1 << 20
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CREDENTIALS_SPACE = socket.CMSG_SPACE(_CREDENTIALS.size)


def _sender_uid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, payload in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS):
            return int(_CREDENTIALS.unpack(payload[: _CREDENTIALS.size])[1])
    return None


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """The socket address of `path`. A path too long for a Unix socket address is reached
    through an open handle on its directory (/proc/self/fd/N/name: Linux only)."""
    if len(str(path).encode()) <= MAX_SOCKET_PATH:
        yield str(path)
        return
    if not Path("/proc/self/fd").is_dir():
        raise ConfigurationError(
            f"store path {path.parent.parent.parent} is too long for a Unix socket on this "
            f"system: use a shorter one (at most {MAX_SOCKET_PATH - 30} characters)"
        )
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)
