"""Helpers for transforms that keep their state in `applyInPandasWithState`.

A state row holds tables as Arrow IPC streams (one binary column per table): Arrow is what
PySpark already uses to move rows to Python, a blob per table keeps a state row one value
however many rows the table has, and reading a blob back as Arrow is a view of its bytes,
not a conversion (only what goes to pandas is converted).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as sf
from pyspark.sql.streaming.state import GroupState

Dtypes = dict[str, str]  # column -> pandas dtype ("str", "int64", "float64", "bool")

NO_HORIZON = 0
"""The horizon before the job has seen any event (Spark's first watermark)."""


def empty_frame(dtypes: Dtypes) -> pd.DataFrame:
    """A frame with no rows and the columns of `dtypes`."""
    return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in dtypes.items()})


def one_frame(batches: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """The group's rows of this micro-batch, which PySpark hands over in chunks."""
    frames = list(batches)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


Strings: TypeAlias = "pd.Series | np.ndarray | pa.ChunkedArray"  # string ids: pandas, numpy, Arrow


def member_of(values: Strings, among: Strings) -> np.ndarray:
    """`values.isin(among)` as a bool array, for string ids.

    pandas' `isin` on Arrow-backed strings (what PySpark hands the state function) builds
    one Python scalar per element of `among`. Against a bucket's ended markers, kept for
    the whole retention, that was half of a stream batch's state update on top of 100k
    orders (benchmarks/results/history.md, "Pipeline").
    """
    found = pc.is_in(_large_strings(values), value_set=_large_strings(among))
    return np.asarray(pc.fill_null(found, False))


def _large_strings(ids: Strings) -> pa.Array:
    if isinstance(ids, pa.ChunkedArray):
        return ids.combine_chunks().cast(pa.large_string())
    return pa.array(ids, type=pa.large_string())


def horizon_ms(state: GroupState) -> int:
    """The event-time watermark as it stood before this micro-batch (the rules' horizon)."""
    return max(state.getCurrentWatermarkMs(), NO_HORIZON)


def arrow_schema(dtypes: Dtypes) -> pa.Schema:
    """The Arrow schema of `dtypes`."""
    return pa.schema(
        [(c, pa.string() if d == "str" else pa.from_numpy_dtype(d)) for c, d in dtypes.items()]
    )


def to_table(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    # pa.array takes pandas' Arrow-backed strings as they are; to_numpy() would build one
    # Python object per string first.
    """`frame` as an Arrow table of `schema`."""
    return pa.table(
        [pa.array(frame[name], type=schema.field(name).type) for name in schema.names],
        schema=schema,
    )


def write_table(table: pa.Table) -> bytes:
    """`table` as an Arrow IPC stream of one record batch (its chunks combined)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return bytes(sink.getvalue().to_pybytes())  # pyarrow is untyped


def read_table(blob: bytes) -> pa.Table:
    """An Arrow table from its IPC stream bytes."""
    return pa.ipc.open_stream(blob).read_all()


def to_arrow(frame: pd.DataFrame, schema: pa.Schema) -> bytes:
    """`frame` as Arrow IPC stream bytes of `schema`."""
    return write_table(to_table(frame, schema))


def from_arrow(blob: bytes) -> pd.DataFrame:
    """A frame from Arrow IPC stream bytes."""
    return read_table(blob).to_pandas()


def iso_utc(millis_column: str) -> Column:
    """Epoch milliseconds -> ISO-8601 text with milliseconds and Z, as the outputs carry it."""
    # The session time zone is UTC (pipelines.session), so the literal Z is true.
    return sf.date_format(sf.timestamp_millis(millis_column), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
