"""Consumed records into write-batch operations: the restore/follow hot loop of the Python
consumer, and what one applied batch reports. The C loop (native_restore.py) fills a batch
the same way, record for record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError

from globalstore.codec import (
    HEADER,
    LAYOUT_VERSION,
    VALUE_FORMAT_VERSION,
    format_headers,
    value_format,
)

Put = Callable[[bytes, bytes], object]
Delete = Callable[[bytes], object]


@dataclass
class Applied:
    """Result of one apply(): non-message events and skipped records the caller must report."""

    records: int = 0
    events: list[Any] = field(default_factory=list)
    # (partition, offset, key) of records whose key is not UTF-8: the topic contract's keys
    # are entity ids, and a key no query can name would only break scans.
    skipped: list[tuple[int, int, bytes]] = field(default_factory=list)
    # {key: live after the batch}: what the batch wrote (True) or deleted (False).
    changed: dict[bytes, bool] = field(default_factory=dict)


class NativeBatch(Protocol):
    """The C loop's consumer (native_restore.NativeRestorer): it consumes one batch and fills
    the write batch itself, as `fill` below does for the Python consumer."""

    def fill(
        self,
        put: Put,
        delete: Delete,
        nexts: dict[int, int],
        events: list[Any],
        skipped: list[tuple[int, int, bytes]],
        timeout: float,
    ) -> int: ...


def fill(
    put: Put,
    delete: Delete,
    messages: Sequence[Any],
    out: Applied,
    nexts: dict[int, int],
    track: bool,
) -> dict[bytes, bool]:
    """The restore/follow hot loop, with as few Python operations per record as possible:
    put or delete each record, note the next offset per partition, and return {key: live
    after the batch} (empty unless `track`)."""
    pack, events = HEADER.pack, out.events
    declared, current = _DECLARED_FORMAT, VALUE_FORMAT_VERSION
    live: dict[bytes, bool] = {}
    for m in messages:
        if m.error() is not None:
            events.append(m)
            if m.error().code() == KafkaError._PARTITION_EOF:
                # Everything before this offset was delivered (or was never data).
                nexts[m.partition()] = max(nexts.get(m.partition(), 0), m.offset())
            continue
        key = m.key()
        p = m.partition()
        o = m.offset()
        nexts[p] = o + 1
        if key is None:
            continue  # a compacted topic cannot hold key-less records; ignore them
        if not key.isascii() and not _is_utf8(key):
            out.skipped.append((p, o, key))
            continue
        value = m.value()
        if value is None:
            delete(key)
            if track:
                live[key] = False
        else:
            # The record's own format header is kept, so a value written in a format newer
            # than this library is refused at query time instead of being misread.
            # Records of the current format, compared in one go: parsing the header cost
            # 0.4 µs a record, a third of this loop.
            headers = m.headers()
            fmt = current if headers == declared else value_format(headers)
            put(key, pack(LAYOUT_VERSION, fmt, m.timestamp()[1], p, o) + value)
            if track:
                live[key] = True
    return live


_DECLARED_FORMAT = format_headers()


def _is_utf8(key: bytes) -> bool:
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
