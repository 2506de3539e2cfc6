"""The recorder of a store with history's versions (versions.py has their layout): beside
each value a batch puts or deletes, the version entry it makes, in the same WriteBatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import rocksdict

from globalstore.codec import HEADER
from globalstore.storage.records import Delete, DeleteAt, Put, Record, Records
from globalstore.storage.versions import NO_RECORD, tombstone, version_key

try:
    from globalstore.storage import _entries
except ImportError:  # built without its C extension: the Python put and delete
    _entries = None  # type: ignore[assignment]

__all__ = ["Recorder"]


class Recorder:
    """The versions of one batch's records, put in its WriteBatch beside their values: the
    put and delete a loop fills the batch with, wrapped, in C (_entries.Versioned) when it is
    built, and finish() once the loop is done. Each moves the value its record replaces into
    its version's entry (a delete also writes its tombstone's): the batch's own last write of
    the key, known at once, else the database's, none for a key `written` (a KeyFilter) says
    was never written, the others read by finish() with one multi-get (one call a batch,
    not a point get a record). A put finds the record's partition and offset in the
    stored bytes' header; a delete has only the key, so it is given them: the C loop calls
    each delete with its record's (delete_at), and the Python loop's records are read
    through follow(), which notes the one being applied (wrap)."""

    def __init__(
        self,
        wb: rocksdict.WriteBatch,
        handle: rocksdict.ColumnFamily,
        get_many: Callable[[list[bytes]], list[bytes | None]],
        written: _entries.KeyFilter | None,
    ) -> None:
        self._put_version, self._handle = wb.put, handle
        self._get_many, self._written = get_many, written
        self._pending: dict[bytes, bytes | None] = {}  # the batch's writes: value, or None
        # The keys whose old value is the database's: (key, partition, offset of the record
        # that replaces it), read and moved by finish().
        self._deferred: list[tuple[bytes, int, int]] = []
        self._current: Record | None = None

    def follow(self, records: Records) -> Records:
        """`records`, each noted as the one being applied as the loop takes it."""
        return _Followed(records, self)

    def note(self, record: Record) -> None:
        """`record` is the one the loop applies now."""
        self._current = record

    def wrap(self, put: Put, delete: Delete) -> tuple[Put, Delete]:
        """`put` and `delete`, each also writing the versions it makes; the delete's record
        is the one noted."""
        delete_at = self.delete_at(delete)

        def delete_noted(key: bytes) -> object:
            current = self._current
            if current is None or current[0] != key:
                return delete(key)
            _, _, _, p, o, ts = current
            return delete_at(key, p, o, ts)

        return self.put(put), delete_noted

    def put(self, put: Put) -> Put:
        """`put`, also moving the value it replaces into its version's entry (nothing for a
        record it did not write: False, a quarantined one)."""
        if _entries is not None:
            return _entries.Versioned(
                put, self._put_version, self._handle, self._pending, self._written,
                self._deferred,
            )  # fmt: skip
        unpack, pending = HEADER.unpack_from, self._pending

        def put_recorded(key: bytes, stored: bytes) -> object:
            _, _, _, p, o = unpack(stored)
            known, old = self._old(key)
            written = put(key, stored)
            if written is not False:  # False: a quarantined record, the key unchanged
                self._replaced(key, known, old, p, o)
                pending[key] = stored
            return written

        return put_recorded

    def delete_at(self, delete: Delete) -> DeleteAt:
        """`delete`, called with the record's partition, offset and timestamp, also moving
        the value it removes into its version's entry and writing the tombstone's."""
        if _entries is not None:
            return _entries.Versioned(
                delete, self._put_version, self._handle, self._pending, self._written,
                self._deferred,
            )  # fmt: skip
        put_version, handle, pending = self._put_version, self._handle, self._pending

        def delete_recorded(key: bytes, p: int, o: int, ts: int) -> object:
            known, old = self._old(key)
            done = delete(key)
            self._replaced(key, known, old, NO_RECORD, NO_RECORD)
            put_version(version_key(key, p, o), tombstone(ts, p), handle)
            pending[key] = None
            return done

        return delete_recorded

    def finish(self) -> None:
        """The loop is done: the old values of the keys the batch did not know, read from
        the database with one multi-get, into their versions' entries."""
        deferred = self._deferred
        if not deferred:
            return
        olds = self._get_many([key for key, _, _ in deferred])
        if _entries is not None:
            _entries.move_deferred(deferred, olds, self._put_version, self._handle)
        else:
            for (key, p, o), old in zip(deferred, olds, strict=True):
                self._move(key, old, p, o)
        deferred.clear()

    def _old(self, key: bytes) -> tuple[bool, bytes | None]:
        """(known, `key`'s value before the record now applied (None: none)); not known:
        the database's, read by finish()."""
        if key in self._pending:
            return True, self._pending[key]
        if self._written is not None and not self._written.seen_then_add([key]):
            return True, None
        return False, None

    def _replaced(self, key: bytes, known: bool, old: bytes | None, p: int, o: int) -> None:
        """The old value of `key` replaced by the record at (`p`, `o`): moved now, or read
        and moved by finish()."""
        if known:
            self._move(key, old, p, o)
        else:
            self._deferred.append((key, p, o))

    def _move(self, key: bytes, old: bytes | None, p: int, o: int) -> None:
        """`old` (None: nothing) replaced by the record at (`p`, `o`): into its version's
        entry, unless it is that record's own value, applied again."""
        if old is None:
            return
        _, _, _, old_p, old_o = HEADER.unpack_from(old)
        if (old_p, old_o) != (p, o):
            self._put_version(version_key(key, old_p, old_o), old, self._handle)


class _Followed:
    """A batch's records, noting each one in its recorder as it is taken."""

    def __init__(self, records: Records, recorder: Recorder) -> None:
        self._records, self._recorder = records, recorder

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        note = self._recorder.note
        for record in self._records:
            note(record)
            yield record
