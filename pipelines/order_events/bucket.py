"""A bucket of orders as its state row stores it (two Arrow IPC blobs), and its state step.

A micro-batch's step reads the bucket as Arrow, which is a view of the blobs' bytes, and
converts to pandas only the part the rules need: the stored events and markers of the
orders the batch has events for. The rules (lifecycle.fold) treat every order on its own,
so folding that part gives those orders exactly what folding the whole bucket would; the
other orders stay Arrow buffers, filtered and copied into the new blobs. A batch's step
thus costs what its own orders cost plus a copy of the bucket's bytes, instead of a
conversion of every stored order to pandas and back (docs/pipelines.md, "State").
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.order_events.lifecycle import EVENT_DTYPES, MARKER_DTYPES, BucketState, fold
from pipelines.pandas_state import (
    arrow_schema,
    from_arrow,
    member_of,
    read_table,
    to_arrow,
    to_table,
    write_table,
)

Blobs = tuple[bytes, bytes]  # a bucket's state row: its events, its ended markers


def fold_stored(
    stored: Blobs | None, batch: pd.DataFrame, horizon_ms: int
) -> tuple[Blobs, pd.DataFrame]:
    """(a bucket's state row or None, a micro-batch of its events, the horizon) ->
    (its new state row, the changed orders): lifecycle.fold, on the batch's orders only."""
    events, markers = (read_table(blob) for blob in stored) if stored else _EMPTY
    # Markers past the horizon go for every order of the bucket, touched or not.
    markers = markers.filter(pc.greater_equal(markers["ended_ms"], horizon_ms))
    orders = batch.order_id.unique()
    touched_events = member_of(events["order_id"], orders)
    touched_markers = member_of(markers["order_id"], orders)
    part = BucketState(
        events.filter(touched_events).to_pandas(), markers.filter(touched_markers).to_pandas()
    )
    folded, changed = fold(part, batch, horizon_ms)
    kept_events = pa.concat_tables(
        [events.filter(~touched_events), to_table(folded.events, _EVENTS)]
    )
    kept_markers = pa.concat_tables(
        [markers.filter(~touched_markers), to_table(folded.markers, _MARKERS)]
    )
    return (write_table(kept_events), write_table(kept_markers)), changed


def decode_bucket(events: bytes, markers: bytes) -> BucketState:
    """A bucket's state row -> all of its state, in pandas."""
    return BucketState(from_arrow(events), from_arrow(markers))


def encode_bucket(bucket: BucketState) -> Blobs:
    """A bucket's events and markers as Arrow blobs."""
    return to_arrow(bucket.events, _EVENTS), to_arrow(bucket.markers, _MARKERS)


_EVENTS = arrow_schema(EVENT_DTYPES)
_MARKERS = arrow_schema(MARKER_DTYPES)
_EMPTY = (_EVENTS.empty_table(), _MARKERS.empty_table())
