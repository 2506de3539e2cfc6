"""Fetching a peer's snapshot over HTTP into a staging directory, the tar read as hostile.

Only plain files (no links, devices, directories or sparse files, whose holes would be written
out in full); an extended header (PAX, GNU long name), which tarfile reads whole into memory,
at most _MAX_EXTENDED bytes, refused before it is read; at most _MAX_FILES entries; and no
more bytes than leave a twentieth of the store's file system free (the manifest comes last,
so it cannot bound what precedes it). The token goes only to the peer's origin, never over
plain http to another host unless INSECURE_ENV says so.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
import shutil
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Self, cast

from globalstore.snapshots.manifest import MANIFEST, Manifest, Staging
from globalstore.snapshots.stream import CHUNK, DB_DIR, END, padding

__all__ = [
    "INSECURE_ENV",
    "PEER_TOKEN_ENV",
    "TOKEN_ENV",
    "Budget",
    "InstallCancelled",
    "Limits",
    "Progress",
    "fetch",
]

log = logging.getLogger(__name__)

TOKEN_ENV = "GLOBALSTORE_TOKEN"  # this server's bearer token: never sent to a peer
PEER_TOKEN_ENV = "GLOBALSTORE_PEER_TOKEN"  # bearer token sent when fetching a snapshot
INSECURE_ENV = "GLOBALSTORE_INSECURE_SNAPSHOT"  # "1": fetch over http:// from another host
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


class InstallCancelled(Exception):  # noqa: N818 - reads as the event it reports
    """The install was stopped from outside (the store is closing)."""


class Budget:
    """What may end an install early: its deadline, and `cancel` (set by close())."""

    def __init__(self, timeout: float, cancel: threading.Event | None) -> None:
        self.timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._cancel = cancel

    def check(self) -> None:
        """Raise InstallCancelled once the store is closing, TimeoutError past the deadline."""
        if self._cancel is not None and self._cancel.is_set():
            raise InstallCancelled("the store is closing")
        if time.monotonic() > self._deadline:
            raise TimeoutError(f"the install took longer than {self.timeout:g}s")

    def remaining(self) -> float:
        """Seconds left before the deadline, never below 1 ms."""
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


class Limits:
    """What bounds a download: the install's budget, and the bytes the store's file system
    can spare (fixed at the start); `progress` hears of the bytes received."""

    def __init__(self, store: Path, budget: Budget, progress: Progress | None) -> None:
        usage = shutil.disk_usage(store)
        self.max_bytes = max(0, usage.free - usage.total // _RESERVE)
        self.budget = budget
        self.progress = progress


def fetch(url: str, staging: Staging, limits: Limits) -> Manifest:
    """Download the peer's snapshot at `url` into `staging` and return its manifest, waiting
    as a busy peer's 503 asks (within the budget)."""
    _check_transport(url)
    request = urllib.request.Request(url)
    # Only the peer token: this server's own token (TOKEN_ENV) never leaves it.
    token = os.environ.get(PEER_TOKEN_ENV)
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
        fileobj=cast(IO[bytes], stream), mode="r|", bufsize=CHUNK, tarinfo=_Header
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
                end = member.offset_data + member.size + len(padding(member.size))
            elif member.name.startswith(f"{DB_DIR}/"):
                staging.add(member.name.removeprefix(f"{DB_DIR}/"), data)
            else:
                raise ValueError(f"unexpected entry {member.name!r} in the snapshot")
    if manifest is None:
        raise ValueError("the snapshot ends before its manifest: it was cut short")
    stream.drain(end + len(END))
    if stream.received != end + len(END) or stream.tail != END:
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

    def __init__(self, raw: io.BufferedIOBase, limits: Limits) -> None:
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
        self.tail = (self.tail + data[-len(END) :])[-len(END) :]
        if limits.progress is not None:
            limits.progress(self.received)
        return data

    def drain(self, limit: int) -> None:
        """Read to the end of the response; ValueError once past `limit` bytes in all (also
        when tarfile's read-ahead already took those bytes: then nothing is left to read)."""
        while self.received <= limit and self.read(CHUNK):
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
