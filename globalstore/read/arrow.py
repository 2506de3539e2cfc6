"""Apache Arrow record batches of a scan, for DuckDB, Polars, pandas and the like.

A scan's (key, on-disk bytes) pairs become record batches of bounded size, so an export of any
size streams: one batch at a time is in memory, never the whole table. Columns:
  key        utf8
  value      the value's JSON text (utf8), or a struct of the fields a caller's schema names
  timestamp  the record's timestamp, ms since the epoch (UTC); null for a legacy value
and, for a scan through a secondary index, index_value (utf8) first.

A value that does not decode (or that a converter raises on, or that does not fit the
caller's struct) has no row: the export goes on without it and gives its InvalidValue to the
export's on_invalid, as every scan does. The errors are a list beside the table, not null
rows: a null value could be a real one, and a column of reasons would widen every table.

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

__all__ = ["BATCH_BYTES", "BATCH_ROWS", "Export", "pyarrow", "reader", "schema"]

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
    on_invalid: codec.OnInvalid  # told of each value left out (it does not decode or fit)
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
    return pa.RecordBatchReader.from_batches(columns, (b for b in batches if b is not None))


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


def _batch(
    pa: ModuleType, columns: Any, chunk: list[tuple[bytes, ...]], export: Export
) -> Any | None:
    """The record batch of a chunk's rows, less those whose value does not decode or fit
    (reported); None when none is left."""
    current = _all_current([row[-1] for row in chunk], export.value_format)
    if export.schema is not None:
        chunk, values = _structs(pa, columns.field("value").type, chunk, export)
    elif current:
        chunk, values = _stored_json(pa, chunk, export)
    else:
        chunk, decoded = _decoded(chunk, export)
        values = pa.array(list(map(orjson.dumps, decoded)), pa.string())
    if not chunk:
        return None
    fields = list(zip(*chunk, strict=True))
    keys: Sequence[bytes] = fields[-2]
    raws: Sequence[bytes] = fields[-1]
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


_Rows = list[tuple[bytes, ...]]


def _stored_json(pa: ModuleType, chunk: _Rows, export: Export) -> tuple[_Rows, Any]:
    """The stored JSON text as it is, of the rows whose text parses: each is parsed only to
    check it (a bad record must be left out here, not fail later in the caller's query)."""
    bodies = [_body(row[-1]) for row in chunk]
    try:
        for _ in map(orjson.loads, bodies):
            pass
    except orjson.JSONDecodeError:
        chunk, _ = _decoded(chunk, export)  # reports the bad ones
        bodies = [_body(row[-1]) for row in chunk]
    return chunk, pa.array(bodies, pa.string())


_body = operator.itemgetter(slice(codec.HEADER_SIZE, None))


def _decoded(chunk: _Rows, export: Export) -> tuple[_Rows, list[Any]]:
    """The rows whose value decodes (converted from an older format), with their values;
    each other one reported to on_invalid."""
    decode, topic = export.decode, export.topic
    rows: _Rows = []
    values: list[Any] = []
    for row in chunk:
        try:
            value = decode(row[-1], row[-2], topic)
        except InvalidValue as exc:
            _report(exc, row, export)
            continue
        rows.append(row)
        values.append(value)
    return rows, values


def _structs(pa: ModuleType, value_type: Any, chunk: _Rows, export: Export) -> tuple[_Rows, Any]:
    """The rows whose value decodes and fits, with their values as structs of the caller's
    fields (missing ones null, others left out); each other one reported."""
    rows, values = _decoded(chunk, export)
    try:
        return rows, pa.array(values, value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass  # one at a time below, to name the rows that do not fit
    fitting: _Rows = []
    fits: list[Any] = []
    for row, value in zip(rows, values, strict=True):
        try:
            pa.array([value], value_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            _, partition, offset = codec.origin(row[-1])
            reason = f"does not fit the schema {value_type}: {exc}"
            _report(InvalidValue(export.topic, row[-2], partition, offset, reason), row, export)
            continue
        fitting.append(row)
        fits.append(value)
    return fitting, pa.array(fits, value_type)


def _report(exc: InvalidValue, row: tuple[bytes, ...], export: Export) -> None:
    if len(row) == 3:  # read through an index: the index value that led to it, as find() says
        exc.index_value = row[0].decode()
    export.on_invalid(exc)


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
