"""The store's meta column family: what it holds beside the data, and how it is parsed.

Keys (column family "meta"):
    layout         on-disk layout version (ASCII decimal); absent in a new store. It names
                   the oldest layout a reader must understand, so it is raised BEFORE the
                   first value of a newer layout is written (a migration in progress says
                   the new layout plus migrate.from)
    migrate.from   the older layout some values may still be in, while migrating
    value_format   the value format values were converted to (set before the first one is)
    convert.cursor where the chunked value-format conversion resumes (only while converting)
    topic          the topic the store copies
    topic_id       that topic's UUID, which tells a recreated topic from the old one
    count          live keys (i64); absent after a bulk restore until its recount ends
    applied_at     wall ms of the last batch applied
    in_sync_at     wall ms when the store last held the topic's end: the reference time of
                   the delete.retention.ms rule (a new store: when it began restoring)
    restored_at    wall ms when the last restore reached its end offsets
    migrate.cursor where the chunked layout migration resumes
    transform      the transform_version values were stored with; absent: no transform
    transform.format  the value format that transform was given (transform.py)
    transform.shape   a declared transform (shaping/fields.py, Shape): its declaration, as
                   JSON; absent: a function, or no transform
    offset:<p>     next offset of partition p, written in the same batch as the data (contract 2)
    index:<name>   a secondary index (shaping/indexes.py): JSON {id, version, built, cursor,
                   scanned, path: a declared index's field, null for a function}
    index.next_id  the id the next index defined gets (ids are never reused)
    ttl            the store's time to live (ms, i64; shaping/ttl.py), for readers in other
                   processes
    history        the history window (ms, i64; storage/history.py): versions are kept
    history.from   wall ms from which the kept versions are complete (a restore's or a
                   resume's start)
    history.layout the layout of the versions (i64; storage/history.py; absent: 1)
    time_index     "built", or "cursor:<hex>" while the time index is built (timeindex.py)
    invalid_values "quarantine" in a store that quarantines values that do not decode;
                   absent: stored as they come
    quarantined    how many keys the quarantine holds (i64; absent: none)
    quarantine:<key>  a quarantined record (quarantine.py), written in the batch of its offset
    invalid_held   invalid_values "store": how many keys hold a value that does not decode
                   (i64; absent: not counted, a store written before the count existed;
                   COUNTING: a bulk restore wrote values unchecked, the pass after it is due)
    invalid:<key>  such a key (its value is the reason), written in the batch of its value
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from globalstore.errors import DamagedLayoutError

__all__ = [
    "I64",
    "INDEX_CF",
    "INDEX_PREFIX",
    "INVALID_PREFIX",
    "K_APPLIED_AT",
    "K_CONVERT_CURSOR",
    "K_COUNT",
    "K_HISTORY",
    "K_HISTORY_FROM",
    "K_HISTORY_LAYOUT",
    "K_INDEX_NEXT_ID",
    "K_INVALID_HELD",
    "K_INVALID_VALUES",
    "K_IN_SYNC_AT",
    "K_LAYOUT",
    "K_MIGRATE_CURSOR",
    "K_MIGRATE_FROM",
    "K_QUARANTINED",
    "K_RESTORED_AT",
    "K_TIME_INDEX",
    "K_TOPIC",
    "K_TOPIC_ID",
    "K_TRANSFORM",
    "K_TRANSFORM_FORMAT",
    "K_TRANSFORM_SHAPE",
    "K_TTL",
    "K_VALUE_FORMAT",
    "META_CF",
    "OFFSET_PREFIX",
    "QUARANTINE_PREFIX",
    "UNDECODABLE_COUNTING",
    "IndexDef",
    "Meta",
    "cursor_entry",
    "index_key",
    "offset_key",
    "opt_int",
    "parse_cursor",
    "parse_meta",
]

I64 = struct.Struct(">q")

META_CF = "meta"  # the column family beside "default", which holds the data
INDEX_CF = "index"  # the secondary indexes' and the time index's entries (keys.py)

K_LAYOUT = b"layout"
K_TOPIC = b"topic"
K_TOPIC_ID = b"topic_id"
K_COUNT = b"count"  # live keys; absent from a bulk restore until its recount ends
K_APPLIED_AT = b"applied_at"  # wall ms of the last batch applied
K_IN_SYNC_AT = b"in_sync_at"  # wall ms when the store last held the topic's end
K_RESTORED_AT = b"restored_at"  # wall ms when the last restore reached its end offsets
K_MIGRATE_CURSOR = b"migrate.cursor"
K_MIGRATE_FROM = b"migrate.from"
K_VALUE_FORMAT = b"value_format"
K_CONVERT_CURSOR = b"convert.cursor"
K_TRANSFORM = b"transform"
K_TRANSFORM_FORMAT = b"transform.format"
K_TRANSFORM_SHAPE = b"transform.shape"
OFFSET_PREFIX = b"offset:"
INDEX_PREFIX = b"index:"
K_INDEX_NEXT_ID = b"index.next_id"
K_TTL = b"ttl"
K_HISTORY = b"history"  # the history window (ms), when the store keeps versions
K_HISTORY_FROM = b"history.from"  # wall ms from which its versions are complete
K_HISTORY_LAYOUT = b"history.layout"  # the layout of its versions (absent: the first)
K_TIME_INDEX = b"time_index"
K_INVALID_VALUES = b"invalid_values"
K_QUARANTINED = b"quarantined"
QUARANTINE_PREFIX = b"quarantine:"
K_INVALID_HELD = b"invalid_held"
INVALID_PREFIX = b"invalid:"
# K_INVALID_HELD while the count is unknown: written in a bulk restore's batches, replaced by
# the count once the pass over the values after it (storage.database) has marked them all.
UNDECODABLE_COUNTING = -1
_BUILT = b"built"  # K_TIME_INDEX of a complete time index; else b"cursor:" + hex


def offset_key(partition: int) -> bytes:
    """The meta key of `partition`'s next offset."""
    return OFFSET_PREFIX + b"%d" % partition


def index_key(name: str) -> bytes:
    """The meta key of index `name`'s definition."""
    return INDEX_PREFIX + name.encode("utf-8")


def parse_cursor(raw: bytes | None) -> tuple[bool, bytes | None]:
    """(has a time index, its build cursor: None once built) of the K_TIME_INDEX entry."""
    if raw is None:
        return False, None
    if raw == _BUILT:
        return True, None
    return True, bytes.fromhex(raw.removeprefix(b"cursor:").decode("ascii"))


def cursor_entry(cursor: bytes | None) -> bytes:
    """The K_TIME_INDEX entry of a time index whose build is at `cursor` (None: built)."""
    return _BUILT if cursor is None else b"cursor:" + cursor.hex().encode("ascii")


@dataclass(frozen=True)
class IndexDef:
    """A secondary index as the meta column family records it. `id` names its entries in
    the index column family (a new one for a new version, so old entries never mix in);
    `cursor` is the key its build resumes from (None once built), `scanned` the keys the
    build has visited so far; `path` the JSON field a declared index reads (None: a
    function), so a reader without the store's config can index a value as of a time;
    `reverse` whether it keeps each key's index values in a reverse entry (keys.py), as
    indexes defined before they were found from the old values did."""

    id: int
    version: int
    built: bool
    cursor: bytes | None = b""
    scanned: int = 0
    path: str | None = None
    reverse: bool = False

    def to_bytes(self) -> bytes:
        """The JSON entry the meta column family stores; parse() reads it back. An index
        without reverse entries names its id "index_id", not "id": a version from before
        them, which would keep such an index the old way and leave entries behind, cannot
        parse the entry, takes the store for damaged and rebuilds it from the topic."""
        cursor = None if self.cursor is None else self.cursor.hex()
        return orjson.dumps(
            {"id" if self.reverse else "index_id": self.id, "version": self.version,
             "built": self.built, "cursor": cursor, "scanned": self.scanned, "path": self.path}
        )  # fmt: skip

    @classmethod
    def parse(cls, raw: bytes) -> IndexDef:
        """The IndexDef to_bytes() wrote; KeyError or ValueError if `raw` is not one."""
        d = orjson.loads(raw)
        cursor, reverse = d["cursor"], "id" in d
        return cls(
            int(d["id"] if reverse else d["index_id"]), int(d["version"]), bool(d["built"]),
            None if cursor is None else bytes.fromhex(cursor), int(d["scanned"]), d.get("path"),
            reverse,
        )  # fmt: skip


@dataclass
class Meta:
    """What the meta column family says about the data beside it."""

    layout: int | None
    topic: str | None = None
    topic_id: str | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    count: int | None = None
    applied_at_ms: int | None = None
    in_sync_at_ms: int | None = None
    restored_at_ms: int | None = None
    migrate_from: int | None = None  # the older layout some values may still be in
    value_format: int | None = None  # the format values were converted to, if ever
    converting: bool = False  # a value-format conversion is under way
    transform_version: int | None = None  # of the transform values went through, if any
    transform_format: int | None = None  # the value format that transform was given
    transform_shape: str | None = None  # a declared transform's declaration, as JSON
    indexes: dict[str, IndexDef] = field(default_factory=dict)  # by name
    index_next_id: int = 1
    ttl_ms: int | None = None  # the writer's time to live, if it has one
    history_ms: int | None = None  # the history window, if the store keeps versions
    history_from_ms: int | None = None  # from when its versions are complete
    history_layout: int | None = None  # the layout of its versions (None: the first, 1)
    time_index: bytes | None = None  # K_TIME_INDEX as stored (parse_cursor reads it)
    invalid_values: str | None = None  # "quarantine", or None: stored as they came
    quarantined: int = 0  # keys the quarantine holds
    # Keys whose latest record did not decode, stored or quarantined (None: not counted).
    undecodable: int | None = None
    undecodable_counting: bool = False  # K_INVALID_HELD is UNDECODABLE_COUNTING


def opt_int(raw: bytes | None) -> int | None:
    """A stored decimal as an int; None stays None."""
    return None if raw is None else int(raw)


def _opt_str(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def _opt_i64(raw: bytes | None) -> int | None:
    return None if raw is None else int(I64.unpack(raw)[0])


def parse_meta(
    get: Callable[[bytes], bytes | None],
    from_offsets: Iterable[tuple[bytes, bytes]],
    from_indexes: Iterable[tuple[bytes, bytes]] = (),
) -> Meta:
    """What a meta column family holds, given its `get` and its entries in key order from
    OFFSET_PREFIX on (and from INDEX_PREFIX on); DamagedLayoutError if any entry does not
    parse."""
    try:
        meta = Meta(layout=opt_int(get(K_LAYOUT)))
        meta.migrate_from = opt_int(get(K_MIGRATE_FROM))
        meta.value_format = opt_int(get(K_VALUE_FORMAT))
        meta.converting = get(K_CONVERT_CURSOR) is not None
        meta.transform_version = opt_int(get(K_TRANSFORM))
        meta.transform_format = opt_int(get(K_TRANSFORM_FORMAT))
        meta.transform_shape = _opt_str(get(K_TRANSFORM_SHAPE))
        meta.topic = _opt_str(get(K_TOPIC))
        meta.topic_id = _opt_str(get(K_TOPIC_ID))
        meta.count = _opt_i64(get(K_COUNT))
        meta.applied_at_ms = _opt_i64(get(K_APPLIED_AT))
        meta.in_sync_at_ms = _opt_i64(get(K_IN_SYNC_AT))
        meta.restored_at_ms = _opt_i64(get(K_RESTORED_AT))
        for key, value in from_offsets:
            if not key.startswith(OFFSET_PREFIX):
                break
            meta.offsets[int(key[len(OFFSET_PREFIX) :])] = I64.unpack(value)[0]
        meta.index_next_id = opt_int(get(K_INDEX_NEXT_ID)) or 1
        meta.ttl_ms = _opt_i64(get(K_TTL))
        meta.history_ms = _opt_i64(get(K_HISTORY))
        meta.history_from_ms = _opt_i64(get(K_HISTORY_FROM))
        meta.history_layout = _opt_i64(get(K_HISTORY_LAYOUT))
        meta.time_index = get(K_TIME_INDEX)
        meta.invalid_values = _opt_str(get(K_INVALID_VALUES))
        meta.quarantined = _opt_i64(get(K_QUARANTINED)) or 0
        held = _opt_i64(get(K_INVALID_HELD))
        meta.undecodable_counting = held == UNDECODABLE_COUNTING
        meta.undecodable = (
            meta.quarantined
            if meta.invalid_values is not None
            else None
            if meta.undecodable_counting
            else held
        )
        for key, value in from_indexes:
            if not key.startswith(INDEX_PREFIX):
                break
            meta.indexes[key[len(INDEX_PREFIX) :].decode("utf-8")] = IndexDef.parse(value)
    except (ValueError, struct.error, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise DamagedLayoutError(str(exc)) from exc
    return meta
