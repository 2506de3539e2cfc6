"""The user's transform on ingest: fn(key, value) -> value | None, run on every record before
it is stored, while restoring and while following.

The transform sees each value decoded and brought to the current value format by the
converters (converters.py), and what it returns is stored in that format: a value in place
of the record's, or None to delete the key. It runs where a batch is written, so storage
writes its one WriteBatch per batch as it always does, values and offsets together: on the
Python loop's records as storage reads them (`Transformed`), and on each value the C loop
writes (`TransformedBatch`: the loop still consumes and frames the records; only the value
goes through Python), both writing the same bytes for the same record.

  * A tombstone deletes its key whatever the transform says (it is not called).
  * A value the store cannot read (not JSON, a format it does not read, a converter that
    raises) is stored as it came, as without a transform: reading it raises InvalidValue or
    ConversionFailed, naming the record.
  * A transform that raises (or returns what JSON cannot hold) is counted and logged with
    the key, partition and offset; the key stays as it was stored before the record, and
    the record's offset is applied like any other's.

A declared transform (fields.Shape) is its own equivalent function, and runs in C where it
can (_shape.h): on the C loop's values with no Python per record (TransformedBatch hands the
loop the shape), on the Python loop's with one C call a record (shape()); what the C code is
not sure of goes through the function, so both write the same bytes.

What a store was written with is kept in its meta (meta.K_TRANSFORM, K_TRANSFORM_FORMAT, and
a declared transform's declaration, K_TRANSFORM_SHAPE): opening it with another
transform_version, another declaration, a transform where there was none (or none where
there was one), or a transform given another value format, rebuilds it (rebuild_reason).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator
from typing import Any, cast

import orjson

from globalstore.codec import HEADER, HEADER_SIZE, LAYOUT_VERSION, format_headers, value_format
from globalstore.config import StoreConfig
from globalstore.converters import ValueFormats
from globalstore.shaping.fields import Shape, native_shape
from globalstore.storage import Record, Records
from globalstore.storage.meta import K_TRANSFORM, K_TRANSFORM_FORMAT, K_TRANSFORM_SHAPE, Meta
from globalstore.storage.records import (
    Checked,
    Delete,
    DeleteAt,
    Headers,
    NativeBatch,
    Put,
    Shaped,
)

__all__ = [
    "UNREADABLE",
    "Transform",
    "Transformed",
    "TransformedBatch",
    "Transformer",
    "meta_entries",
    "rebuild_reason",
    "transformer",
]

log = logging.getLogger(__name__)

Transform = Callable[[str, Any], Any]

_FAILURES_LOGGED_PER_BATCH = 10  # a transform failing on every record must not flood the log


class _Unreadable(enum.Enum):
    """What shape() returns for a value the store cannot read: it is stored as it came."""

    UNREADABLE = "unreadable"


UNREADABLE = _Unreadable.UNREADABLE


class Transformer:
    """A store's transform, with what it needs to feed it: the value formats."""

    def __init__(self, fn: Transform, formats: ValueFormats, topic: str) -> None:
        self.fn, self.formats, self.topic = fn, formats, topic
        # What a transformed record declares: the current format.
        self.headers: Headers = [*format_headers(formats.current)]
        # A declared transform in C: its spec (_shape.h), for values of the current format
        # in a store without converters (whose values are stored as they are read).
        declared = isinstance(fn, Shape) and native_shape is not None and formats.plain
        self.spec = fn.spec() if declared and isinstance(fn, Shape) else None

    def records(self, records: Records) -> Transformed:
        """The Python loop's records, transformed as storage reads them."""
        return Transformed(self, records)

    def native(self, batch: NativeBatch) -> TransformedBatch:
        """The C loop's batches, transformed as the loop writes them."""
        return TransformedBatch(self, batch)

    def shape(self, key: bytes, value: bytes, version: int) -> bytes | _Unreadable | None:
        """The JSON bytes to store for a record of this key and value (of format `version`),
        None to delete the key, or UNREADABLE to store the record as it came. Raises what
        the transform raises."""
        formats = self.formats
        if self.spec is not None and version == formats.current:
            assert native_shape is not None  # a spec only with the C code
            out = native_shape(value, self.spec)
            if out is not False:  # False: unsure, the function decides
                return out  # type: ignore[return-value]  # bytes or None
        if not formats.reads(version):
            return UNREADABLE
        try:
            name = key.decode("utf-8")
            decoded = formats.upgrade(orjson.loads(value), version)
        except Exception:  # not JSON, or a converter raised: reading it will say which
            return UNREADABLE
        out = self.fn(name, decoded)
        return None if out is None else orjson.dumps(out)


class _Failures:
    """The records one batch's transform raised on: counted, the first few logged."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.count = 0

    def add(self, key: bytes, partition: int, offset: int, exc: Exception) -> None:
        self.count += 1
        if self.count <= _FAILURES_LOGGED_PER_BATCH:
            # The message, not the exception: a handler that keeps its records (pytest's,
            # a memory handler) would keep the exception's frames, and through them the
            # write under way and its handles on the database, which then stays locked
            # after the store is closed.
            log.warning(
                "transform raised on key %r of %s partition %d offset %d (%s: %s); the key "
                "is kept as it was",
                key.decode("utf-8"),
                self.topic,
                partition,
                offset,
                type(exc).__name__,
                str(exc),
            )

    def end(self) -> int:
        """The batch is written: say how many went unlogged; the count."""
        more = self.count - _FAILURES_LOGGED_PER_BATCH
        if more > 0:
            log.warning("transform raised on %d more records of %s", more, self.topic)
        return self.count


class Transformed:
    """A batch's records for the Python loop (storage/records.py's fill), each transformed as
    it is read (no list is made of them), and how many the transform raised on."""

    __slots__ = ("_records", "_transformer", "failures")

    def __init__(self, transformer: Transformer, records: Records) -> None:
        self._transformer, self._records = transformer, records
        self.failures = 0

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        shape, current = self._transformer.shape, self._transformer.headers
        failures = _Failures(self._transformer.topic)
        for record in self._records:
            key, value, headers, p, o, ts = record
            if key is None or value is None:
                yield record  # a tombstone deletes whatever the transform says
                continue
            try:
                out = shape(key, value, value_format(headers))
            except Exception as exc:
                failures.add(key, p, o, exc)
                # fill() skips a record without a key but applies its offset.
                yield None, None, None, p, o, ts
                continue
            yield record if out is UNREADABLE else (key, out, current, p, o, ts)
        self.failures = failures.end()


class TransformedBatch:
    """The C loop's batches (follow.native.NativeRestorer: a bulk restore, which lists no
    changes), transformed as the loop writes them: the loop calls put(key, stored bytes) for
    each record, and this puts the transformed value, or deletes the key, in its place. It
    writes the bytes the Python loop writes for the same record."""

    def __init__(self, transformer: Transformer, batch: NativeBatch) -> None:
        self._transformer, self._batch = transformer, batch
        self.failures = 0

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
        """`checked` is not taken: every value is transformed, in Python, first (but those
        of a declared transform the C loop is sure of, which it shapes itself); nor is
        `shape`: the transform is this batch's own. A value the transform drops is deleted
        as a tombstone is (given its record when `record_deletes`)."""
        shaped_value, current = self._transformer.shape, self._transformer.formats.current
        failures = _Failures(self._transformer.topic)
        unpack, pack, size = HEADER.unpack_from, HEADER.pack, HEADER_SIZE
        drop = _dropping(delete, record_deletes)

        def put_shaped(key: bytes, raw: bytes) -> None:
            _, version, ts, p, o = unpack(raw)
            try:
                out = shaped_value(key, raw[size:], version)
            except Exception as exc:
                failures.add(key, p, o, exc)  # nothing written: the key stays as it was
                return
            if out is UNREADABLE:
                put(key, raw)
            elif out is None:
                drop(key, p, o, ts)
            else:
                put(key, pack(LAYOUT_VERSION, current, ts, p, o) + out)

        # The loop shapes the values of the current format it is sure of in C, if declared.
        spec = self._transformer.spec
        in_c = None if spec is None else (spec, current, put)
        records = self._batch.fill(
            put_shaped, delete, nexts, skipped, timeout, shape=in_c, record_deletes=record_deletes
        )
        self.failures = failures.end()
        return records


def _dropping(delete: Delete | DeleteAt, record_deletes: bool) -> DeleteAt:
    """`delete` called as a DeleteAt: given the record when it takes it, else the key only."""
    if record_deletes:
        return cast(DeleteAt, delete)
    delete_key = cast(Delete, delete)
    return lambda key, _p, _o, _ts: delete_key(key)


def transformer(config: StoreConfig) -> Transformer | None:
    """The transformer of a store's config, or None when it has no transform."""
    if config.transform is None:
        return None
    return Transformer(config.transform, config.value_formats(), config.topic)


def meta_entries(config: StoreConfig) -> dict[bytes, bytes]:
    """The meta entries a new store of this config is initialised with (none without a
    transform: a store written before transforms existed reads the same)."""
    if config.transform is None:
        return {}
    out = {
        K_TRANSFORM: b"%d" % config.transform_version,
        K_TRANSFORM_FORMAT: b"%d" % config.value_format,
    }
    if isinstance(config.transform, Shape):
        out[K_TRANSFORM_SHAPE] = config.transform.declaration().encode("utf-8")
    return out


def rebuild_reason(meta: Meta, config: StoreConfig) -> str | None:
    """Why values stored under `meta` are not what this config's transform would store, or
    None if they are."""
    stored, wanted = meta.transform_version, config.transform_version
    if config.transform is None:
        if stored is None:
            return None
        return f"store was written with transform version {stored}; no transform is given now"
    if stored is None:
        return f"store was written without a transform; transform version {wanted} is given now"
    if stored != wanted:
        return f"store was written with transform version {stored}, not {wanted}"
    declared = config.transform.declaration() if isinstance(config.transform, Shape) else None
    if meta.transform_shape != declared:
        was = "a transform function" if meta.transform_shape is None else meta.transform_shape
        now = "a transform function" if declared is None else declared
        return f"store was written with {was}, not {now}"
    if meta.transform_format != config.value_format:
        return (
            f"store's transform was given values of format {meta.transform_format}, not "
            f"{config.value_format}"
        )
    return None
