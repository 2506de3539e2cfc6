"""How the process that writes a store wakes the processes that read it (shared.py).

The writer raises a counter in shared memory (<store>/readers/batches, a mapped file) after
every batch it applies: a reader compares it with the value it last caught up to on each
query, for the price of one memory read, so the thread that queries catches up itself and
never waits for another thread to get the GIL back (docs/benchmarks.md, "Fresh under load").

Each reader binds a Unix datagram socket at <store>/readers/<id>/wake.sock. After every batch
the writer applies, after a heal moves the live copy, and once a second while nothing
happens, the writer sends each of those sockets one datagram: a WriterNote, which says who
writes, where the live copy is, how far it has applied the topic and how far the topic goes.
The writer lists the readers' directory once a second (the heartbeat), never per batch, so
a writer without readers makes no system call for them on its follower's hot path.

A send never blocks the writer: a reader whose queue is full misses one wake-up and catches
up at the next. A socket nobody listens on any more belongs to a reader that died without
closing: its directory is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import mmap
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from globalstore.errors import ConfigurationError

log = logging.getLogger(__name__)

READERS = "readers"  # the directory, inside the store's, where readers register
WAKE_SOCKET = "wake.sock"
BATCHES = "batches"  # in READERS: the writer's batch counter
HEARTBEAT_S = 1.0  # a note at least this often, so readers can tell a quiet writer from none
# A Unix socket's path is limited to 107 bytes (108 with its NUL) on Linux, 103 on macOS.
MAX_SOCKET_PATH = 103


@dataclass(frozen=True)
class WriterNote:
    """What a writer tells its readers, all of one instant."""

    writer: str  # this writer's incarnation: another id means a restart, maybe a rebuild
    live: str  # the live copy's directory, relative to the store's ("" or "rebuild")
    state: str  # State.value of the writer's store
    ready: bool  # it has completed a restore: its live copy can be read
    positions: Mapping[int, int]  # next offset it has applied, per partition
    high: Mapping[int, int]  # the topic's end offsets as it last knew them
    sent_at: float  # wall-clock seconds

    def encode(self) -> bytes:
        body = {**self.__dict__, "positions": dict(self.positions), "high": dict(self.high)}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> WriterNote:
        body = json.loads(data)
        for name in ("positions", "high"):
            body[name] = {int(p): int(o) for p, o in body[name].items()}
        return cls(**body)


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
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
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
        cell = self._cell
        return 0 if cell is None else cell.value

    def raise_(self) -> None:
        """One more batch applied (the writer's side; one thread at a time)."""
        if self._cell is not None:
            self._cell.value += 1

    def close(self) -> None:
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
        data = note.encode()
        with self._sending:
            for reader in list(self._readers):
                try:
                    with _address(reader / WAKE_SOCKET) as address:
                        self._socket.sendto(data, address)
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
        return [entry for entry in readers_dir.iterdir() if entry.is_dir()]
    except FileNotFoundError:
        return []


class WakeSocket:
    """The reader's side: a directory of its own under <store>/readers, with its socket."""

    def __init__(self, store_path: Path, reader_id: str) -> None:
        self.directory = store_path / READERS / reader_id
        self.directory.mkdir(parents=True)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with _address(self.directory / WAKE_SOCKET) as address:
            self._socket.bind(address)

    def receive(self, timeout: float) -> WriterNote | None:
        """The newest note that arrives within `timeout` (older queued ones are dropped),
        or None."""
        sock = self._socket
        sock.settimeout(timeout)
        try:
            data = sock.recv(_MAX_NOTE)
        except TimeoutError:
            return None
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                data = sock.recv(_MAX_NOTE)
        try:
            return WriterNote.decode(data)
        except (ValueError, TypeError, KeyError) as exc:  # not a writer's: someone else's
            log.warning("ignored a datagram that is not a writer's note: %s", exc)
            return None

    def close(self) -> None:
        self._socket.close()
        shutil.rmtree(self.directory, ignore_errors=True)


_MAX_NOTE = 1 << 20


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
