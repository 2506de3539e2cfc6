"""A peer for snapshot tests: a loopback HTTP server that answers each path with crafted bytes
(sent in pieces, with a pause after each, so a download lasts as long as a test needs) or
with a redirect, and records every request's headers. It speaks HTTP/1.0: the body ends
where the connection closes, as when a real peer dies halfway."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import io
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from globalstore.snapshots.stream import tar_chunks
from globalstore.storage import Storage, meta


@dataclasses.dataclass
class Route:
    pieces: list[bytes] = dataclasses.field(default_factory=list)
    pause: float = 0.0  # seconds after each piece
    redirect: str | None = None  # a Location to answer 302 with instead
    busy: int = 0  # answer 503 + Retry-After this many times first, as a peer with no slot
    retry_after: str = "0.2"


class Peer:
    """routes[path] says what GET path answers; requests holds (path, headers) of each
    request; sent counts the body bytes written so far (all routes)."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sent = 0
        peer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                peer.requests.append((self.path, dict(self.headers)))
                route = peer.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                elif route.busy > 0:
                    route.busy -= 1
                    self.send_response(503)
                    self.send_header("Retry-After", route.retry_after)
                    self.end_headers()
                elif route.redirect is not None:
                    self.send_response(302)
                    self.send_header("Location", route.redirect)
                    self.end_headers()
                else:
                    self.send_response(200)
                    self.end_headers()
                    with contextlib.suppress(ConnectionError):  # the client hung up: fine
                        for piece in route.pieces:
                            self.wfile.write(piece)
                            self.wfile.flush()
                            peer.sent += len(piece)
                            time.sleep(route.pause)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test's output is for its own findings

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/v1/snapshot") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def serve(self, body: bytes, path: str = "/v1/snapshot", pieces: int = 1, pause: float = 0.0,
              ) -> None:  # fmt: skip
        """Answer `path` with `body` in `pieces` parts of about equal size."""
        size = -(-len(body) // pieces) if body else 1
        parts = [body[i : i + size] for i in range(0, len(body), size)]
        self.routes[path] = Route(parts, pause)

    def __enter__(self) -> Peer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def checkpoint_of_a_store(tmp_path: Path, values: int = 3) -> Path:
    """tmp_path/cp: a checkpoint of a store of topic-a (at tmp_path/a) holding `values` keys
    of 700 random bytes, at position {0: values}."""
    store = Storage(tmp_path / "a")
    try:
        store.initialise("topic-a", "id-of-topic-a", 1)
        pairs = [(b"k%d" % i, os.urandom(700)) for i in range(values)]
        store.write_values(pairs, {meta.offset_key(0): meta.I64.pack(values)})
        store.checkpoint(tmp_path / "cp")
    finally:
        store.close()
    return tmp_path / "cp"


def snapshot_bytes(checkpoint: Path) -> bytes:
    """The whole tar stream GET /v1/snapshot sends for `checkpoint`."""
    return b"".join(tar_chunks(checkpoint))


def members(body: bytes) -> Iterator[tarfile.TarInfo]:
    """The entries of a tar stream, with their offsets in it."""
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as tar:
        yield from tar


def hostile_tars() -> dict[str, bytes]:
    """Tars a hostile peer could send: names that climb out, absolute names, links."""
    return {
        "climbs out": tar_of(entry("db/../escaped")),
        "climbs out of db": tar_of(entry("../escaped")),
        "absolute": tar_of(entry("/tmp/globalstore-escaped")),
        "symlink": tar_of(entry("db/CURRENT", tarfile.SYMTYPE, 0, link="/etc/passwd")),
        "hard link": tar_of(entry("db/a"), entry("db/CURRENT", tarfile.LNKTYPE, 0, link="db/a")),
    }


def tar_of(*entries: tarfile.TarInfo) -> bytes:
    """A PAX tar of `entries`, each file's data `size` x's."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for entry in entries:
            t.addfile(entry, io.BytesIO(b"x" * entry.size) if entry.isfile() else None)
    return out.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, size: int = 1,
          pax: dict[str, str] | None = None, link: str = "") -> tarfile.TarInfo:  # fmt: skip
    """A header of `kind`, `size` bytes, with PAX records `pax`, linked to `link`."""
    info = tarfile.TarInfo(name)
    info.type, info.size, info.pax_headers, info.linkname = kind, size, dict(pax or {}), link
    return info


def gnu_sparse(name: str, holes: int) -> bytes:
    """A GNU sparse entry of no data and `holes` bytes of holes (old GNU format), and the
    end-of-archive marker: tarfile would extract `holes` zero bytes from it."""
    block = bytearray(entry(name, tarfile.GNUTYPE_SPARSE, size=0).tobuf(tarfile.GNU_FORMAT))
    block[386:398] = b"%011o\0" % holes  # one region, of no bytes, after the holes
    block[398:410] = b"%011o\0" % 0
    block[483:495] = b"%011o\0" % holes  # the size once extracted
    block[148:156] = b"        "
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block) + bytes(1024)


def huge_header(kind: bytes, declared: int, sent: int) -> bytes:
    """An extended header (PAX or GNU long name) that says it is `declared` bytes long, of
    which `sent` follow."""
    header = entry("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "./PaxHeader",
                   kind, size=declared)  # fmt: skip
    return header.tobuf(tarfile.USTAR_FORMAT) + b"x" * sent
