"""Records into write-batch operations: the restore/follow hot loop of the Python consumer,
and what one applied batch reports. The C loop (follow/native.py) fills a batch the same
way, record for record.

A Record is a plain tuple: no Kafka type reaches storage/. The thread's consumer source
(follow/consumer_source.py) makes them from the consumed messages, and keeps the consumer's
events (errors, partition ends) for itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from globalstore.codec import (
    HEADER,
    LAYOUT_VERSION,
    VALUE_FORMAT_VERSION,
    format_headers,
    value_format,
)

__all__ = [
    "Applied",
    "Checked",
    "Delete",
    "DeleteAt",
    "Headers",
    "NativeBatch",
    "Put",
    "Record",
    "Records",
    "Shaped",
    "fill",
    "written",
]

# put(key, stored bytes): False when it did not write them (a quarantined record).
Put = Callable[[bytes, bytes], object]
Delete = Callable[[bytes], object]
# delete(key, partition, offset, timestamp ms): a delete given its record, whose version a
# store with history writes (history.py).
DeleteAt = Callable[[bytes, int, int, int], object]
# A quarantining store's way past its check for the C loop (quarantine.py): (put, held keys,
# the batch's changes). A value of the current format the loop finds certainly JSON, of a
# key in neither, may go to that put instead of the checking one.
Checked = tuple[Put, set[bytes], dict[bytes, bool]]
# A declared transform the C loop applies itself (shaping/transform.py, TransformedBatch):
# (its spec, the value format it writes, the put its values go to).
Shaped = tuple[tuple[object, ...], int, Put]

# A record's headers as the consumer gives them: (name, value) pairs in their order, or None.
Headers = list[tuple[str, bytes | None]] | None
# (key, value, headers, partition, offset, timestamp ms): a record of the topic. A plain tuple,
# not a NamedTuple, because fill() only unpacks it and making one costs per record.
Record = tuple[bytes | None, bytes | None, Headers, int, int, int]


class Records(Protocol):
    """A batch's records: a list, or what makes them as they are read
    (follow/consumer_source.py)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Record]: ...


@dataclass
class Applied:
    """Result of one apply(): records applied, and the events and skipped records the caller
    must report."""

    records: int = 0
    # (partition, offset, key) of records whose key is not UTF-8: the topic contract's keys
    # are entity ids, and a key no query can name would only break scans.
    skipped: list[tuple[int, int, bytes]] = field(default_factory=list)
    # {key: live after the batch}: what the batch wrote (True) or deleted (False).
    present: dict[bytes, bool] = field(default_factory=dict)
    # Whether a partition's position moved: by records, or by an end alone (transaction
    # markers, aborted records), which those waiting for a position must see too.
    moved: bool = False


class NativeBatch(Protocol):
    """The C loop's consumer (follow.native.NativeRestorer): it consumes one batch and fills
    the write batch itself, as `fill` below does for the Python consumer."""

    def fill(
        self,
        put: Put,
        delete: Delete | DeleteAt,
        nexts: dict[int, int],
        skipped: list[tuple[int, int, bytes]],
        timeout: float,
        checked: Checked | None = None,
        shape: Shaped | None = None,
        record_deletes: bool = False,
    ) -> int:
        """Consume one batch (waiting up to `timeout` seconds for the first record) and write it
        through `put` and `delete`; returns the number of records (events not counted).
        `shape`: a declared transform it applies to the values it is sure of itself.
        `record_deletes`: `delete` is a DeleteAt, given each delete's record."""


def fill(
    put: Put,
    delete: Delete,
    records: Records,
    out: Applied,
    nexts: dict[int, int],
    track: bool,
) -> dict[bytes, bool]:
    """The restore/follow hot loop, with as few Python operations per record as possible:
    put or delete each record, note the next offset per partition, and return {key: live
    after the batch} (empty unless `track`)."""
    pack = HEADER.pack
    declared, current = _DECLARED_FORMAT, VALUE_FORMAT_VERSION
    live: dict[bytes, bool] = {}
    for key, value, headers, p, o, timestamp in records:
        nexts[p] = o + 1
        if key is None:
            # A compacted topic cannot hold key-less records; ignore them. A transform that
            # raised (transform.py) leaves its record so: only its offset is applied.
            continue
        if not key.isascii() and not _is_utf8(key):
            out.skipped.append((p, o, key))
            continue
        if value is None:
            delete(key)
            if track:
                live[key] = False
        else:
            # The record's own format header is kept, so a value written in a format newer
            # than this library is refused at query time instead of being misread.
            # Records of the current format, compared in one go: parsing the header cost
            # 0.4 µs a record, a third of this loop.
            fmt = current if headers == declared else value_format(headers)
            # False: the quarantine kept the record (quarantine.py), the key is unchanged.
            if put(key, pack(LAYOUT_VERSION, fmt, timestamp, p, o) + value) is not False and track:
                live[key] = True
    return live


_DECLARED_FORMAT = format_headers()


def written(record: Record) -> tuple[bytes, bytes | None] | None:
    """What fill() writes for one record, by the same rules (the change feed's view of a
    batch, read/changes.py): (key, on-disk value or None for a delete), or None for a record
    it leaves out (no key, or a key that is not UTF-8)."""
    key, value, headers, p, o, timestamp = record
    if key is None or (not key.isascii() and not _is_utf8(key)):
        return None
    if value is None:
        return key, None
    return key, HEADER.pack(LAYOUT_VERSION, value_format(headers), timestamp, p, o) + value


def _is_utf8(key: bytes) -> bool:
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
