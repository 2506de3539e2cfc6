"""Apache Arrow record batches of a scan, for DuckDB, Polars, pandas and the like.

A scan's (key, on-disk bytes) pairs become record batches of bounded size, so an export of any
size streams: one batch at a time is in memory, never the whole table. Columns:
  key        utf8
  value      the value's JSON text (utf8), or a struct of the fields a caller's schema names
  timestamp  the record's timestamp, ms since the epoch (UTC); null for a legacy value
and, for a scan through a secondary index, index_value (utf8) first.

pyarrow is an optional dependency (the `arrow` extra): imported when a reader is made.
"""

from __future__ import annotations

import importlib
import itertools
import operator
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson

from globalstore import codec
from globalstore.errors import InvalidValue

if TYPE_CHECKING:
    import pyarrow as pa

# DuckDB's vector size; and a batch of ~150-byte values made in passes over 2,048 rows stays
# in the CPU's cache: 10,000-row batches took 1.14x to 1.27x as long (docs/performance.md,
# "Arrow export").
BATCH_ROWS = 2048
# Also ends a batch: large values must not make 2,048 rows a gigabyte.
BATCH_BYTES = 16 << 20


def pyarrow() -> ModuleType:
    """The pyarrow module, or ImportError saying which extra brings it."""
    try:
        importlib.import_module("pyarrow.compute")  # makes pyarrow.compute an attribute
        return importlib.import_module("pyarrow")
    except ImportError as exc:
        raise ImportError(
            f"to_arrow() needs pyarrow: pip install 'globalstore[arrow]' ({exc})"
        ) from exc


@dataclass(frozen=True)
class Export:
    """How a store's values become columns."""

    topic: str
    decode: codec.Decode  # the store's: converts older value formats
    value_format: int  # the format queries answer in: its stored JSON passes through as text
    schema: pa.Schema | pa.StructType | None = None  # a struct value column of these fields
    batch_rows: int = BATCH_ROWS
    batch_bytes: int = BATCH_BYTES

    def __post_init__(self) -> None:
        if self.batch_rows < 1 or self.batch_bytes < 1:
            raise ValueError(
                f"batch_rows and batch_bytes must be at least 1, not "
                f"{self.batch_rows} and {self.batch_bytes}"
            )


def schema(export: Export, indexed: bool) -> pa.Schema:
    """The columns of an export; index_value first when it reads through an index."""
    pa = pyarrow()
    value_type = pa.string() if export.schema is None else _struct(pa, export.schema)
    fields = [
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", value_type),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
    ]
    if indexed:
        fields.insert(0, pa.field("index_value", pa.string(), nullable=False))
    return pa.schema(fields)


def reader(
    rows: Iterator[tuple[bytes, ...]], columns: pa.Schema, export: Export
) -> pa.RecordBatchReader:
    """A reader of `rows`, (key, on-disk bytes) or (index value, key, on-disk bytes), as
    record batches of `columns` (schema()). The rows are read as the batches are."""
    pa = pyarrow()
    batches = (_batch(pa, columns, chunk, export) for chunk in _chunks(rows, export))
    return pa.RecordBatchReader.from_batches(columns, batches)


def _struct(pa: ModuleType, schema: Any) -> Any:
    if isinstance(schema, pa.Schema):
        return pa.struct(list(schema))
    if isinstance(schema, pa.StructType):
        return schema
    raise TypeError(f"schema must be a pyarrow Schema or StructType, not {type(schema).__name__}")


_PIECE = 1024  # rows taken at a time at most: the byte budget is checked after each piece
_last = operator.itemgetter(-1)


def _chunks(rows: Iterator[tuple[bytes, ...]], export: Export) -> Iterator[list[tuple[bytes, ...]]]:
    """Runs of rows, each ending at batch_rows rows or at about the row whose value reaches
    batch_bytes. Rows are taken in pieces (a loop per row would cost as much as the rest of
    a batch): one first, then as many as the values seen so far say fit in the budget."""
    max_rows, max_bytes = export.batch_rows, export.batch_bytes
    chunk: list[tuple[bytes, ...]] = []
    size = 0
    while True:
        room = 1 if not chunk else max_rows - len(chunk)
        if size:
            room = min(room, (max_bytes - size) * len(chunk) // size + 1)
        piece = list(itertools.islice(rows, min(room, _PIECE)))
        chunk += piece
        size += sum(map(len, map(_last, piece)))
        if chunk and (not piece or len(chunk) >= max_rows or size >= max_bytes):
            yield chunk
            chunk, size = [], 0
        if not piece:
            return


def _batch(pa: ModuleType, columns: Any, chunk: list[tuple[bytes, ...]], export: Export) -> Any:
    fields = list(zip(*chunk, strict=True))
    keys: Sequence[bytes] = fields[-2]
    raws: Sequence[bytes] = fields[-1]
    current = _all_current(raws, export.value_format)
    if export.schema is not None:
        values = _structs(pa, columns.field("value").type, keys, raws, export)
    elif current:
        values = _stored_json(pa, keys, raws, export)
    else:
        values = pa.array(_converted_json(keys, raws, export), pa.string())
    stamps = _timestamps(pa, raws) if current else _origin_timestamps(pa, raws)
    arrays = [pa.array(keys, pa.string()), values, stamps.cast(columns.field("timestamp").type)]
    if len(fields) == 3:
        arrays.insert(0, pa.array(fields[0], pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=columns)


def _all_current(raws: Sequence[bytes], value_format: int) -> bool:
    """Whether every value is stored in layout 1 and the format queries answer in: the usual
    case, where the JSON passes through and the headers are read all at once."""
    size, layout = codec.HEADER_SIZE, codec.LAYOUT_VERSION
    return all(len(raw) > size and raw[0] == layout and raw[1] == value_format for raw in raws)


def _stored_json(
    pa: ModuleType, keys: Sequence[bytes], raws: Sequence[bytes], export: Export
) -> Any:
    """The stored JSON text as it is: parsed only to check it (a bad record must fail here,
    naming its key as get() does, not later in the caller's query)."""
    bodies = list(map(_body, raws))
    try:
        for _ in map(orjson.loads, bodies):
            pass
    except orjson.JSONDecodeError:
        _converted_json(keys, raws, export)  # raises InvalidValue naming the record
    return pa.array(bodies, pa.string())


_body = operator.itemgetter(slice(codec.HEADER_SIZE, None))


def _converted_json(keys: Sequence[bytes], raws: Sequence[bytes], export: Export) -> list[bytes]:
    """Each value decoded (and converted from an older format) and encoded again."""
    decode, topic = export.decode, export.topic
    return [orjson.dumps(decode(raw, key, topic)) for key, raw in zip(keys, raws, strict=True)]


def _structs(
    pa: ModuleType, value_type: Any, keys: Sequence[bytes], raws: Sequence[bytes], export: Export
) -> Any:
    """The decoded values as structs of the caller's fields (missing ones null, others left
    out); InvalidValue naming the first value that does not fit."""
    decode, topic = export.decode, export.topic
    values = [decode(raw, key, topic) for key, raw in zip(keys, raws, strict=True)]
    try:
        return pa.array(values, value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        failed = exc
    for key, raw, value in zip(keys, raws, values, strict=True):  # which one: to name its key
        try:
            pa.array([value], value_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            _, partition, offset = codec.origin(raw)
            reason = f"does not fit the schema {value_type}: {exc}"
            raise InvalidValue(export.topic, key, partition, offset, reason) from None
    raise failed


_STAMP = operator.itemgetter(slice(codec.TIMESTAMP_AT, codec.TIMESTAMP_AT + codec.TIMESTAMP.size))


def _timestamps(pa: ModuleType, raws: Sequence[bytes]) -> Any:
    """Record timestamps of layout-1 values, unpacked all at once."""
    packed = b"".join(map(_STAMP, raws))
    stamps = pa.array(struct.unpack(f">{len(raws)}q", packed), pa.int64())
    return _unknown_as_null(pa, stamps)


def _origin_timestamps(pa: ModuleType, raws: Sequence[bytes]) -> Any:
    """Record timestamps of values in any layout, one at a time."""
    stamps = pa.array([ts for ts, _, _ in map(codec.origin, raws)], pa.int64())
    return _unknown_as_null(pa, stamps)


def _unknown_as_null(pa: ModuleType, stamps: Any) -> Any:
    pc = pa.compute
    return pc.if_else(pc.equal(stamps, codec.UNKNOWN), pa.scalar(None, pa.int64()), stamps)
