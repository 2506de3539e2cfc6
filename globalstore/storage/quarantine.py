"""The quarantine of a store with invalid_values="quarantine" (config.OnInvalidValue), and
the count of undecodable values a store with invalid_values="store" holds.

Every value a batch writes is checked as it is put, whichever loop fills the batch (Python or
C: both call the put and delete Batch hands them). A record whose value does not decode (not
JSON, a value format the store does not read, a converter that raises) is not applied: its key
keeps what it held. The record is kept instead in the meta column family, under
QUARANTINE_PREFIX + key, in the same WriteBatch as its offset, so after a crash the
quarantine is never ahead of or behind the offsets. A later record of the key that decodes,
or its tombstone, is applied and takes the key out. A key holds one quarantined record at
most, its latest.

Entry: reason length u32 | reason (UTF-8) | the record as the data would have stored it
(codec.HEADER, with its timestamp, partition and offset, then the value as it came).

A store that stores such a value as it came checks every value the same way, to count them
exactly (an operator sees how many a store holds, across restarts): the key is marked in the
meta column family, under INVALID_PREFIX + key (the entry is the reason), in the value's
WriteBatch, and a later value that decodes, or a tombstone, removes the mark. Both keep their
count in the same WriteBatch (Batch.advance).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import orjson

from globalstore import codec
from globalstore.converters import ValueFormats, decoder
from globalstore.errors import InvalidValue
from globalstore.storage.meta import (
    INVALID_PREFIX,
    K_INVALID_HELD,
    K_QUARANTINED,
    QUARANTINE_PREFIX,
)
from globalstore.storage.records import Delete, Put

__all__ = ["Check", "Quarantine", "Quarantined", "checker", "entry_key", "held", "marked"]

# (key, stored bytes) -> why the value does not decode, or None when it does.
Check = Callable[[bytes, bytes], str | None]
_REASON = struct.Struct(">I")
_LOGGED = 10  # undecodable values a batch names in the log; the rest are counted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quarantined:
    """A record the store did not apply, and why."""

    key: str
    partition: int
    offset: int
    timestamp: int  # the record's, ms
    reason: str
    value: bytes  # as it came

    def to_dict(self, max_value_bytes: int | None = None) -> dict[str, object]:
        """A JSON-able view; the value as text (undecodable bytes replaced), only its first
        `max_value_bytes` when given (a held value is as large as the topic allows),
        with its length in bytes."""
        shown = self.value if max_value_bytes is None else self.value[:max_value_bytes]
        return {
            "key": self.key,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "reason": self.reason,
            "value": shown.decode("utf-8", "replace"),
            "value_bytes": len(self.value),
            "value_cut": len(shown) < len(self.value),
        }


def checker(formats: ValueFormats, topic: str) -> Check:
    """The check of a store reading `formats`: what its queries' decoding would raise. A
    value of the current format (a loop's put always packs a layout-1 header) is parsed
    here, one call fewer a record; any other goes through the queries' own decoding."""
    decode, loads, size, current = (
        decoder(formats),
        orjson.loads,
        codec.HEADER_SIZE,
        formats.current,
    )

    def check(key: bytes, raw: bytes) -> str | None:
        if raw[1] == current:
            try:
                loads(raw[size:])
                return None
            except orjson.JSONDecodeError:
                pass  # decode() says why, as a query would
        try:
            decode(raw, key, topic)
        except InvalidValue as exc:
            return exc.reason
        return None

    return check


def entry_key(key: bytes) -> bytes:
    """The meta key of `key`'s quarantined record."""
    return QUARANTINE_PREFIX + key


def held(
    meta_items: Callable[[bytes], Iterable[tuple[bytes, bytes]]], after: str | None = None
) -> Iterator[Quarantined]:
    """The quarantined records, in key order (after the key `after` if given), of a store
    whose meta entries from a key on are `meta_items(key)` (Storage.meta_items)."""
    size = len(QUARANTINE_PREFIX)
    # "\0" appended to a key is the next possible key.
    first = QUARANTINE_PREFIX if after is None else entry_key(after.encode("utf-8") + b"\0")
    for key, entry in meta_items(first):
        if not key.startswith(QUARANTINE_PREFIX):
            return
        (n,) = _REASON.unpack_from(entry)
        raw = entry[_REASON.size + n :]
        ts, partition, offset = codec.origin(raw)
        reason = entry[_REASON.size : _REASON.size + n].decode("utf-8")
        value = raw[codec.HEADER_SIZE :]
        yield Quarantined(key[size:].decode("utf-8"), partition, offset, ts, reason, value)


def marked(meta_items: Callable[[bytes], Iterable[tuple[bytes, bytes]]]) -> Iterator[bytes]:
    """The keys marked as holding a value that does not decode (a store that stores them),
    in key order, of a store whose meta entries from a key on are `meta_items(key)`."""
    size = len(INVALID_PREFIX)
    for key, _reason in meta_items(INVALID_PREFIX):
        if not key.startswith(INVALID_PREFIX):
            return
        yield key[size:]


class Quarantine:
    """The writer's quarantine (or, `withhold` False, its marks of the undecodable values it
    stores): the keys it holds and the check a put goes through."""

    def __init__(
        self,
        check: Check,
        held: Iterable[bytes],
        plain: bool = False,
        *,
        withhold: bool = True,
        where: str = "",
    ) -> None:
        """`plain`: the store reads the library's own value format and has no converters, so
        the C loop may take a value it finds certainly JSON past the check (records.Checked,
        _json_check.h). `withhold`: quarantine a value that does not decode, else store it
        and mark its key. `where` names the store in the log."""
        self.check = check
        self.keys = set(held)
        self.plain = plain
        self.withhold = withhold
        self.where = where
        self.count_key = K_QUARANTINED if withhold else K_INVALID_HELD
        self._prefix = QUARANTINE_PREFIX if withhold else INVALID_PREFIX
        self._arrived: list[tuple[bytes, str, bytes]] = []  # (key, reason, stored bytes)

    def guard(
        self, put: Put, delete: Delete, put_meta: Callable[[bytes, bytes | None], None]
    ) -> tuple[Put, Delete, dict[bytes, bool]]:
        """A put and delete that check before `put`/`delete`, and the changes they make to
        the quarantine ({key: held after the batch}), which settle() adopts once written.
        The put returns False for a record it quarantined (storage/records.py's fill then
        lists no change of its key)."""
        check, held, prefix, withhold = self.check, self.keys, self._prefix, self.withhold
        changes: dict[bytes, bool] = {}
        arrived = self._arrived = []

        def put_checked(key: bytes, raw: bytes) -> bool:
            reason = check(key, raw)
            if reason is not None:
                reason_bytes = reason.encode("utf-8")
                arrived.append((key, reason, raw))
                changes[key] = True
                if withhold:
                    entry = _REASON.pack(len(reason_bytes)) + reason_bytes + raw
                    put_meta(prefix + key, entry)
                    return False
                put(key, raw)
                put_meta(prefix + key, reason_bytes)
                return True
            put(key, raw)
            if key in held or key in changes:
                put_meta(prefix + key, None)
                changes[key] = False
            return True

        def delete_checked(key: bytes) -> None:
            delete(key)
            if key in held or key in changes:
                put_meta(prefix + key, None)
                changes[key] = False

        return put_checked, delete_checked, changes

    def remark(
        self,
        stored: Iterable[tuple[bytes, bytes]],
        put_meta: Callable[[bytes, bytes | None], None],
        changes: dict[bytes, bool],
    ) -> None:
        """Mark the `stored` values (key, stored bytes) that do not decode and unmark those
        that do, noting each change in `changes` as guard()'s put does: the pass over what a
        bulk restore stored unchecked."""
        check, held, prefix = self.check, self.keys, self._prefix
        for key, raw in stored:
            reason = check(key, raw)
            if reason is not None and key not in held:
                put_meta(prefix + key, reason.encode("utf-8"))
                changes[key] = True
            elif reason is None and key in held:
                put_meta(prefix + key, None)
                changes[key] = False

    def entry_of(self, key: bytes) -> bytes:
        """The meta key of `key`'s quarantined record, or of its mark."""
        return self._prefix + key

    def count_after(self, changes: dict[bytes, bool]) -> int:
        """How many keys it holds once `changes` are written."""
        held = self.keys
        gained = sum(1 for k, v in changes.items() if v and k not in held)
        lost = sum(1 for k, v in changes.items() if not v and k in held)
        return len(held) + gained - lost

    def settle(self, changes: dict[bytes, bool]) -> None:
        """`changes` are written: hold what they say, and name in the log the values that
        arrived undecodable (the first few of the batch, and how many more)."""
        for key, now in changes.items():
            if now:
                self.keys.add(key)
            else:
                self.keys.discard(key)
        arrived, self._arrived = self._arrived, []
        done = "quarantined" if self.withhold else "stored as it came"
        for key, reason, raw in arrived[:_LOGGED]:
            _ts, partition, offset = codec.origin(raw)
            log.warning(
                "store %s: the value of key %r (partition %d, offset %d) does not decode, %s: %s",
                self.where, key.decode("utf-8", "replace"), partition, offset, done, reason,
            )  # fmt: skip
        if len(arrived) > _LOGGED:
            log.warning(
                "store %s: %d more values of that batch do not decode, %s",
                self.where, len(arrived) - _LOGGED, done,
            )  # fmt: skip
