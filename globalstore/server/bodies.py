"""Bodies of the routes: the JSON answer of most, and those of the routes that read many
items or files: a page, an export, a snapshot. Each of these is built in worker threads
(never on the event loop), and each releases what it reads (a RocksDB iterator, a
checkpoint) when it ends or is closed."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Generic, TypeVar

import orjson
from starlette.responses import Response

from globalstore.codec import OnInvalid
from globalstore.errors import InvalidValue, StoreClosed
from globalstore.read.protocols import FollowingStore
from globalstore.server.params import encode_cursor, encode_match_cursor
from globalstore.snapshots.archive import checkpoint_dir
from globalstore.snapshots.stream import tar_chunks
from globalstore.storage.quarantine import Quarantined

__all__ = [
    "QUARANTINE_VALUE_BYTES",
    "Counted",
    "Scan",
    "invalid",
    "json_response",
    "match_page",
    "ndjson_chunks",
    "page",
    "quarantine_page",
    "snapshot_chunks",
]

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS
_Item = TypeVar("_Item")
_Pos = TypeVar("_Pos")

# A scan opened with the body's report of the values it leaves out (the store's on_invalid).
Scan = Callable[[OnInvalid], Iterator[_Item]]
Counted = Callable[[], object]  # counts one value left out (the decode errors metric)

QUARANTINE_VALUE_BYTES = 1024  # of a held value shown in a page of the quarantine
_QUARANTINE_CHUNK = 16  # held records read at a time (each whole, however large)


def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """`body` as a JSON answer (integer keys allowed, as in positions)."""
    return Response(
        orjson.dumps(body, option=_JSON_OPTIONS), status, headers, media_type="application/json"
    )


def page(scan: Scan[tuple[str, Any]], limit: int, max_bytes: int, counted: Counted) -> bytes:
    """The JSON of one page of `scan`: its items, and the values it left out under `invalid`
    (key, partition, offset, reason), at most `limit` of both and `max_bytes` of them (but at
    least one, however big), with the cursor past the last of either if any is left out."""
    built = _Page(limit, max_bytes, counted, _key)

    def entry(item: tuple[str, Any]) -> tuple[bytes, str]:
        key, value = item
        return _dumps({"key": key, "value": value}), key

    _fill(built, scan(built.skip), entry)
    return built.body(encode_cursor)


def match_page(
    scan: Scan[tuple[str, str, Any]], limit: int, max_bytes: int, counted: Counted
) -> bytes:
    """As page(), of index matches (index value, key, value): items {key, value,
    index_value}, invalid ones with their index_value too, the cursor naming the last one's
    index value and key."""
    built = _Page(limit, max_bytes, counted, _match)

    def entry(match: tuple[str, str, Any]) -> tuple[bytes, tuple[str, str]]:
        index_value, key, value = match
        return _dumps({"key": key, "value": value, "index_value": index_value}), (index_value, key)

    _fill(built, scan(built.skip), entry)
    return built.body(lambda last: encode_match_cursor(*last))


def quarantine_page(
    held: Callable[[str | None, int], list[Quarantined]],
    after: str | None,
    limit: int,
    max_bytes: int,
) -> bytes:
    """The JSON of one page of held records after the key `after`, as `held(after, n)` gives
    them (the store's quarantined()): at most `limit` and `max_bytes` of them (at least
    one), each value cut to its first QUARANTINE_VALUE_BYTES, with the cursor past the last
    if any is left out. Read a few records at a time: a held value may be as large as the
    topic allows, so only those few are in memory whole."""
    built = _Page(limit, max_bytes, lambda: None, _key)
    while True:
        chunk = held(after, _QUARANTINE_CHUNK)
        for record in chunk:
            if not built.add(_dumps(record.to_dict(QUARANTINE_VALUE_BYTES)), record.key):
                return _held_body(built)
        if len(chunk) < _QUARANTINE_CHUNK:
            return _held_body(built)
        after = chunk[-1].key


def _held_body(built: _Page[str]) -> bytes:
    items = b",".join(built.items)
    return b'{"quarantined":[' + items + b'],"cursor":' + built.next(encode_cursor) + b"}"


class _PageFull(Exception):  # noqa: N818 - reads as the condition that ends the scan
    """A value left out that the page has no room to report: the page ends before it."""


class _Page(Generic[_Pos]):
    """One page as its scan goes: items and values left out, in scan order, while they fit."""

    def __init__(
        self, limit: int, max_bytes: int, counted: Counted, at: Callable[[InvalidValue], _Pos]
    ) -> None:
        self.limit, self.max_bytes, self.counted, self.at = limit, max_bytes, counted, at
        self.items: list[bytes] = []
        self.invalid: list[bytes] = []
        self.size = 0
        self.last: _Pos | None = None  # where the next page starts after
        self.more = False

    def add(self, part: bytes, position: _Pos) -> bool:
        """Hold an item; False (and the page is done) when it does not fit."""
        if not self._room(part):
            return False
        self.items.append(part)
        self.last = position
        return True

    def skip(self, exc: InvalidValue) -> None:
        """The scan's on_invalid: hold the value left out; _PageFull ends the scan before it
        when it does not fit (the next page reports it)."""
        part = _dumps(invalid(exc))
        if not self._room(part):
            raise _PageFull
        self.counted()
        self.invalid.append(part)
        self.last = self.at(exc)

    def _room(self, part: bytes) -> bool:
        held = len(self.items) + len(self.invalid)
        if held == self.limit or (held and self.size + len(part) > self.max_bytes):
            self.more = True
            return False
        self.size += len(part) + 1  # and its comma
        return True

    def body(self, cursor: Callable[[_Pos], str]) -> bytes:
        items, invalid = b",".join(self.items), b",".join(self.invalid)
        return (
            b'{"items":['
            + items
            + b'],"invalid":['
            + invalid
            + b'],"cursor":'
            + self.next(cursor)
            + b"}"
        )

    def next(self, cursor: Callable[[_Pos], str]) -> bytes:
        """The cursor of the next page as JSON (null: none follows)."""
        return _dumps(cursor(self.last) if self.more and self.last is not None else None)


def _fill(
    page: _Page[_Pos], items: Iterator[_Item], entry: Callable[[_Item], tuple[bytes, _Pos]]
) -> None:
    try:
        for item in items:
            part, position = entry(item)
            if not page.add(part, position):
                break
    except _PageFull:
        pass  # the page is full: its cursor is past what it holds
    finally:
        _close(items)


def invalid(exc: InvalidValue) -> dict[str, Any]:
    """What a page or an export says of a value it left out."""
    said: dict[str, Any] = {
        "key": exc.key,
        "partition": exc.partition,
        "offset": exc.offset,
        "reason": exc.reason,
    }
    if exc.index_value is not None:
        said["index_value"] = exc.index_value
    return said


def _key(exc: InvalidValue) -> str:
    return exc.key


def _match(exc: InvalidValue) -> tuple[str, str]:
    return exc.index_value or "", exc.key


def _dumps(body: Any) -> bytes:
    return orjson.dumps(body, option=_JSON_OPTIONS)


def ndjson_chunks(
    scan: Scan[tuple[str, Any]], size: int, counted: Counted
) -> Generator[bytes, None, None]:
    """NDJSON lines in chunks of about `size` lines. A value that cannot be decoded is left
    out and an {"error": ..., "key", "partition", "offset", "reason"} line stands in its
    place; the stream goes on. A read racing the store's close ends the stream (after the
    lines before it) with an {"error": ...} line: the 200 status is already sent."""
    lines: list[bytes] = []

    def skipped(exc: InvalidValue) -> None:
        counted()
        lines.append(orjson.dumps({"error": f"{type(exc).__name__}: {exc}", **invalid(exc)}))

    items = scan(skipped)
    try:
        for key, value in items:
            lines.append(orjson.dumps({"key": key, "value": value}))
            if len(lines) >= size:
                yield _ndjson(lines)
                lines.clear()
    except StoreClosed as exc:
        lines.append(orjson.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    finally:
        _close(items)
    if lines:
        yield _ndjson(lines)


def _ndjson(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n"


def snapshot_chunks(store: FollowingStore) -> Generator[bytes, None, None]:
    """A checkpoint of `store`, taken at the first chunk, as a tar stream. The checkpoint
    (hard links to table files RocksDB would otherwise delete) goes when this ends or is
    closed."""
    dest = checkpoint_dir(store.path)
    try:
        store.checkpoint(dest)
        yield from tar_chunks(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def _close(items: Iterator[Any]) -> None:
    """Release a scan's RocksDB iterator (store.items returns a generator)."""
    with contextlib.suppress(Exception):
        items.close()  # type: ignore[attr-defined]
