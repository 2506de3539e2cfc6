"""Bodies of the routes that read many items or files: a page, an export, a snapshot. Each is
built in worker threads (never on the event loop), and each releases what it reads (a RocksDB
iterator, a checkpoint) when it ends or is closed."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Generator, Iterator
from typing import Any

import orjson

from globalstore.errors import InvalidValue, StoreClosed
from globalstore.read.protocols import FollowingStore
from globalstore.server.params import encode_cursor, encode_match_cursor
from globalstore.snapshots import archive as snapshot

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def page(items: Iterator[tuple[str, Any]], limit: int, max_bytes: int) -> bytes:
    """The JSON of one page of `items`: at most `limit` items and `max_bytes` of them (but at
    least one, however big), with the cursor of the next page if any item is left out."""
    parts: list[bytes] = []
    size = 0
    last: str | None = None
    more = False
    try:
        for key, value in items:
            part = orjson.dumps({"key": key, "value": value}, option=_JSON_OPTIONS)
            if len(parts) == limit or (parts and size + len(part) > max_bytes):
                more = True
                break
            parts.append(part)
            size += len(part) + 1  # and its comma
            last = key
    finally:
        _close(items)
    cursor = orjson.dumps(encode_cursor(last) if more and last is not None else None)
    return b'{"items":[' + b",".join(parts) + b'],"cursor":' + cursor + b"}"


def match_page(matches: Iterator[tuple[str, str, Any]], limit: int, max_bytes: int) -> bytes:
    """As page(), of index matches (index value, key, value): items {key, value,
    index_value}, the cursor naming the last one's index value and key."""
    parts: list[bytes] = []
    size = 0
    last: tuple[str, str] | None = None
    more = False
    try:
        for index_value, key, value in matches:
            item = {"key": key, "value": value, "index_value": index_value}
            part = orjson.dumps(item, option=_JSON_OPTIONS)
            if len(parts) == limit or (parts and size + len(part) > max_bytes):
                more = True
                break
            parts.append(part)
            size += len(part) + 1  # and its comma
            last = index_value, key
    finally:
        _close(matches)
    cursor = orjson.dumps(encode_match_cursor(*last) if more and last is not None else None)
    return b'{"items":[' + b",".join(parts) + b'],"cursor":' + cursor + b"}"


def ndjson_chunks(items: Iterator[tuple[str, Any]], size: int) -> Generator[bytes, None, None]:
    """NDJSON lines in chunks of `size` items. A value that cannot be decoded ends the stream
    (after the lines before it) with an {"error": ...} line: the 200 status is already sent."""
    dumps = orjson.dumps
    lines: list[bytes] = []
    try:
        for key, value in items:
            lines.append(dumps({"key": key, "value": value}))
            if len(lines) == size:
                lines.append(b"")
                yield b"\n".join(lines)
                lines = []
    except (InvalidValue, StoreClosed) as exc:
        lines.append(dumps({"error": f"{type(exc).__name__}: {exc}"}))
    finally:
        _close(items)
    if lines:
        lines.append(b"")
        yield b"\n".join(lines)


def snapshot_chunks(store: FollowingStore) -> Generator[bytes, None, None]:
    """A checkpoint of `store`, taken at the first chunk, as a tar stream. The checkpoint
    (hard links to table files RocksDB would otherwise delete) goes when this ends or is
    closed."""
    dest = snapshot.checkpoint_dir(store.path)
    try:
        store.checkpoint(dest)
        yield from snapshot.tar_chunks(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def _close(items: Iterator[Any]) -> None:
    """Release a scan's RocksDB iterator (store.items returns a generator)."""
    with contextlib.suppress(Exception):
        items.close()  # type: ignore[attr-defined]
