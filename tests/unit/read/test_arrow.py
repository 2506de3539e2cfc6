"""to_arrow() without a broker, on real RocksDB: the columns (JSON text or the caller's struct,
record timestamps), the same filters and errors as items() and find(), older value formats
converted, batches bounded by rows and bytes, one point-in-time view; and a DuckDB query over
it equal to the same computation over items()."""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pytest

from globalstore import (
    GlobalStore,
    InvalidValue,
    ReadOnlyStore,
    SharedStore,
    StoreClosed,
    StoreNotReady,
    UnknownIndex,
)
from globalstore.codec import HEADER, LAYOUT_VERSION, format_headers
from globalstore.storage import Record, Storage
from tests.unit.shaping.test_indexes import _open, _View
from tests.unit.stores.test_shared_store_parts import Writer

TOPIC = "t"


def _records(values: Iterable[tuple[str, Any, int]], fmt: int = 1, start: int = 0) -> list[Record]:
    """Records for Storage.apply from (key, JSON value, record timestamp ms)."""
    return [
        (key.encode(), orjson.dumps(value), format_headers(fmt), 0, start + i, ts)
        for i, (key, value, ts) in enumerate(values)
    ]


def _store(path: Path, values: Iterable[tuple[str, Any, int]], fmt: int = 1) -> Path:
    storage, _ = _open(path)
    storage.apply(_records(values, fmt), {}, True, 1)
    storage.close()
    return path


def _raw_values(path: Path, pairs: list[tuple[bytes, bytes]]) -> None:
    """Values written as they are: what a layout-0 release or a bad producer left."""
    storage = Storage(path)
    storage.load(storage.read_meta())
    storage.write_values(pairs)
    storage.close()


def _rows(reader: pa.RecordBatchReader) -> list[dict[str, Any]]:
    return reader.read_all().to_pylist()


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


def _n(i: int) -> tuple[str, Any, int]:
    return (f"k{i:02d}", {"i": i, "name": f"n{i}"}, 1_700_000_000_000 + i)


def test_each_key_is_a_row_of_its_json_and_record_timestamp(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", [_n(i) for i in range(5)])
    # A layout-0 value (no header: no timestamp) and a record that had no timestamp.
    _raw_values(path, [(b"legacy", b'{"old": true}')])
    storage, _ = _open(path)
    storage.apply(_records([("no-ts", {"x": None}, -1)], start=5), {}, True, 1)
    storage.close()
    with ReadOnlyStore(path) as store:
        reader = store.to_arrow()
        assert reader.schema.names == ["key", "value", "timestamp"]
        assert reader.schema.field("value").type == pa.string()
        assert reader.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
        rows = _rows(reader)
        assert [r["key"] for r in rows] == list(store.keys())
        assert {r["key"]: orjson.loads(r["value"]) for r in rows} == dict(store.items())
        stamps = {r["key"]: r["timestamp"] for r in rows}
        assert stamps["legacy"] is None and stamps["no-ts"] is None
        # Batches of current values only read their headers all at once: the same stamps.
        current = _rows(store.to_arrow(prefix="k")) + _rows(store.to_arrow(prefix="no-ts"))
        assert {r["key"]: r["timestamp"] for r in current} == {
            k: ts for k, ts in stamps.items() if k != "legacy"
        }
        for entry in store.entries(prefix="k"):
            assert _ms(stamps[entry.key]) == entry.timestamp
    # The stored text itself in a batch of current values, not a re-encoding of it.
    spaced = b'{ "i" : 1,\n  "name": "caf\xc3\xa9" }'
    storage, _ = _open(path)
    storage.apply([(b"spaced", spaced, format_headers(1), 0, 6, 7)], {}, True, 1)
    storage.close()
    with ReadOnlyStore(path) as store:
        assert _rows(store.to_arrow(prefix="spaced"))[0]["value"] == spaced.decode()


def test_filters_are_those_of_items(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", [_n(i) for i in range(30)])
    filters: list[dict[str, Any]] = [
        {"prefix": "k1"},
        {"start": "k05", "end": "k12"},
        {"prefix": "k2", "start": "k25"},
        {"prefix": "k", "end": "k03", "reverse": True},
        {"reverse": True, "limit": 4},
        {"prefix": "nothing"},
        {"start": "k10", "end": "k05"},
    ]
    with ReadOnlyStore(path) as store:
        for f in filters:
            rows = _rows(store.to_arrow(**f))
            assert [(r["key"], orjson.loads(r["value"])) for r in rows] == list(store.items(**f)), f


def test_a_schema_makes_the_value_a_struct_of_its_fields(tmp_path: Path) -> None:
    values = [
        ("a", {"courier": "c-1", "total": 5, "extra": [1]}, 1),
        ("b", {"total": 7}, 2),  # no courier: null
    ]
    path = _store(tmp_path / "s", values)
    fields = pa.schema([("courier", pa.string()), ("total", pa.int64())])
    with ReadOnlyStore(path) as store:
        for schema in (fields, pa.struct(list(fields))):
            reader = store.to_arrow(schema=schema)
            assert reader.schema.field("value").type == pa.struct(list(fields))
            assert [r["value"] for r in _rows(reader)] == [
                {"courier": "c-1", "total": 5},
                {"courier": None, "total": 7},
            ]
        with pytest.raises(TypeError, match="Schema or StructType"):
            store.to_arrow(schema=pa.int64())  # type: ignore[arg-type]


def _left_out(store: ReadOnlyStore, **options: Any) -> tuple[list[str], list[InvalidValue]]:
    """The keys of to_arrow's rows, and the errors its on_invalid was given."""
    errors: list[InvalidValue] = []
    rows = _rows(store.to_arrow(on_invalid=errors.append, **options))
    return [r["key"] for r in rows], errors


def test_a_value_that_does_not_fit_the_schema_has_no_row_and_is_reported(tmp_path: Path) -> None:
    values = [("a", {"total": 1}, 1), ("b", {"total": "many"}, 2), ("c", {"total": 3}, 3)]
    path = _store(tmp_path / "s", values)
    schema = pa.schema([("total", pa.int64())])
    with ReadOnlyStore(path) as store:
        keys, errors = _left_out(store, schema=schema)
        assert keys == ["a", "c"]
        assert [(e.key, e.partition, e.offset) for e in errors] == [("b", 0, 1)]
        assert errors[0].reason.startswith("does not fit the schema")
    # A JSON value that is no object does not fit a struct either.
    storage, _ = _open(path)
    storage.apply(_records([("b", [1, 2], 9)], start=3), {}, True, 1)
    storage.close()
    with ReadOnlyStore(path) as store:
        keys, errors = _left_out(store, schema=schema)
        assert keys == ["a", "c"] and [(e.key, e.offset) for e in errors] == [("b", 3)]


def test_a_value_that_is_not_json_has_no_row_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _store(tmp_path / "s", [_n(i) for i in range(4)])
    bad = HEADER.pack(LAYOUT_VERSION, 1, 5, 0, 42) + b'{"i": '
    _raw_values(path, [(b"k01", bad), (b"k02", bad)])
    with ReadOnlyStore(path) as store:
        keys, errors = _left_out(store)
        assert keys == ["k00", "k03"]
        assert [(e.key, e.offset, e.reason[:14]) for e in errors] == [
            ("k01", 42, "not valid JSON"),
            ("k02", 42, "not valid JSON"),
        ]
        # The good rows of that batch keep their stored text; so do batches of bad rows only.
        assert _rows(store.to_arrow()) == _rows(store.to_arrow(end="k01")) + _rows(
            store.to_arrow(start="k03")
        )
        assert list(store.to_arrow(prefix="k01", batch_rows=1)) == []
        # Without on_invalid (all but the first read above): a WARNING naming the record,
        # once per record however often it is read.
        store.to_arrow().read_all()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2, warned
    assert "key 'k01' in topic 't' partition 0 offset 42: not valid JSON" in warned[0]


def test_an_on_invalid_that_raises_ends_the_export(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", [_n(i) for i in range(3)])
    _raw_values(path, [(b"k01", HEADER.pack(LAYOUT_VERSION, 1, 5, 0, 7) + b"nope")])

    def stop(exc: InvalidValue) -> None:
        raise exc

    with ReadOnlyStore(path) as store, pytest.raises(InvalidValue, match="offset 7"):
        store.to_arrow(on_invalid=stop).read_all()


def test_older_value_formats_come_converted(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", [("old", {"n": 1}, 1)], fmt=1)
    storage, _ = _open(path)
    storage.apply(_records([("new", {"n": 2, "v2": True}, 2)], fmt=2, start=1), {}, True, 1)
    storage.close()

    def to_v2(value: Any) -> Any:
        return {**value, "v2": True}

    with ReadOnlyStore(path, value_format=2, converters={1: to_v2}) as store:
        rows = _rows(store.to_arrow())
        assert {r["key"]: orjson.loads(r["value"]) for r in rows} == {
            "new": {"n": 2, "v2": True},
            "old": {"n": 1, "v2": True},
        }
        # A batch of current-format values only: passed through as stored.
        assert _rows(store.to_arrow(prefix="new")) == [rows[0]]
        struct = pa.schema([("v2", pa.bool_())])
        assert [r["value"] for r in _rows(store.to_arrow(schema=struct))] == [{"v2": True}] * 2
    with ReadOnlyStore(path) as plain:
        keys, errors = _left_out(plain)
        assert keys == ["old"] and [e.key for e in errors] == ["new"]
        assert errors[0].reason == "unknown value format"
    # A converter that raises: that value is left out of a batch of converted values.
    with ReadOnlyStore(path, value_format=2, converters={1: _fails}) as store:
        keys, errors = _left_out(store)
        assert keys == ["new"] and [e.key for e in errors] == ["old"]
        assert "converter from value format 1 failed" in errors[0].reason


def _fails(value: Any) -> Any:
    raise ValueError("no v2 form")


def test_batches_are_bounded_by_rows_and_bytes(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", [_n(i) for i in range(25)])
    with ReadOnlyStore(path) as store:
        sizes = [b.num_rows for b in store.to_arrow(batch_rows=10)]
        assert sizes == [10, 10, 5]
        # Each stored value is 22 header bytes + 20 or 22 of JSON: a budget of 100 bytes ends
        # a batch at its third value, the one that reaches it.
        batches = list(store.to_arrow(batch_bytes=100))
        assert [b.num_rows for b in batches] == [3] * 8 + [1]
        assert sum(b.num_rows for b in batches) == 25
        assert [r["key"] for b in batches for r in b.to_pylist()] == list(store.keys())
        with pytest.raises(ValueError, match="at least 1"):
            store.to_arrow(batch_rows=0)


def test_an_empty_result_is_a_reader_of_no_batches(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", [_n(1)])
    with ReadOnlyStore(path) as store:
        reader = store.to_arrow(prefix="absent")
        table = reader.read_all()
        assert table.num_rows == 0 and table.schema.names == ["key", "value", "timestamp"]


def test_an_index_is_read_like_find_matches(tmp_path: Path) -> None:
    couriers = {"k1": "c-1", "k2": "c-10", "k3": "c-1", "k4": "c-2", "k5": None}
    values = [(k, {"courier": c, "tags": ["x", k]} if c else {}, 1) for k, c in couriers.items()]
    path = _store(tmp_path / "s", values)
    storage, _ = _open(path)  # a writable view with the test's index functions
    view = _View(storage)
    filters: list[dict[str, Any]] = [
        {"value": "c-1"},
        {"prefix": "c-1"},
        {"start": "c-10", "end": "d"},
        {"prefix": "c", "reverse": True, "limit": 3},
        {},
    ]
    for f in filters:
        reader = view.to_arrow(index="by_courier", **f)
        assert reader.schema.names == ["index_value", "key", "value", "timestamp"]
        got = [(r["index_value"], r["key"], orjson.loads(r["value"])) for r in _rows(reader)]
        assert got == list(view.find_matches("by_courier", **f)), f
    # A key with several index values is a row for each.
    tagged = [(r["index_value"], r["key"]) for r in _rows(view.to_arrow(index="by_tag"))]
    assert tagged == [(k, k) for k in ("k1", "k2", "k3", "k4")] + [
        ("x", k) for k in ("k1", "k2", "k3", "k4")
    ]
    with pytest.raises(UnknownIndex, match="no index 'nope'"):
        view.to_arrow(index="nope")
    with pytest.raises(ValueError, match="either a value, or prefix"):
        view.to_arrow(index="by_courier", value="c-1", prefix="c")
    with pytest.raises(ValueError, match="value only with an index"):
        view.to_arrow(value="c-1")
    storage.close()


def test_a_reader_reads_the_view_of_its_call(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    storage.apply(_records([_n(i) for i in range(5)]), {}, True, 1)
    view = _View(storage)
    reader = view.to_arrow(batch_rows=2)
    by_index = view.to_arrow(index="by_courier")
    first = reader.read_next_batch()
    storage.apply(
        _records([("k03", {"i": -3, "courier": "c"}, 9), ("k99", {"i": 99}, 9)], start=5),
        {},
        True,
        1,
    )
    rest = reader.read_all()
    keys = first.column("key").to_pylist() + rest.column("key").to_pylist()
    assert keys == [f"k{i:02d}" for i in range(5)]
    assert orjson.loads(rest.column("value")[1].as_py()) == _n(3)[1]
    assert by_index.read_all().num_rows == 0  # no courier then
    storage.close()


def test_a_closed_store_refuses_an_export(tmp_path: Path) -> None:
    store = ReadOnlyStore(_store(tmp_path / "s", [_n(1)]))
    store.close()
    with pytest.raises(StoreClosed):
        store.to_arrow()


def test_a_store_not_ready_refuses_an_export(tmp_path: Path) -> None:
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "s")  # no broker answers there
    with pytest.raises(StoreNotReady):
        store.to_arrow()
    store.start(timeout=5, wait=False)
    try:
        with pytest.raises(StoreNotReady):
            store.to_arrow(index="by_courier")
    finally:
        store.close()


def test_a_shared_store_exports_what_its_writer_wrote(tmp_path: Path) -> None:
    writer = Writer(tmp_path, Storage(tmp_path))
    writer.write(("a", '{"n": 1}'), ("b", '{"n": 2}'), start=0)
    with SharedStore(writer.home).start(timeout=5) as shared:
        reader = shared.to_arrow()
        writer.write(("c", '{"n": 3}'), start=2)  # after the call: not in its view
        rows = _rows(reader)
        assert [(r["key"], orjson.loads(r["value"])) for r in rows] == [
            ("a", {"n": 1}),
            ("b", {"n": 2}),
        ]
        assert [r["key"] for r in _rows(shared.to_arrow())] == ["a", "b", "c"]
    writer.close()


def test_without_pyarrow_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ReadOnlyStore(_store(tmp_path / "s", [_n(1)])) as store:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        monkeypatch.setitem(sys.modules, "pyarrow.compute", None)
        with pytest.raises(ImportError, match=r"pip install 'globalstore\[arrow\]'"):
            store.to_arrow()


def _orders(rng: random.Random, n: int) -> list[tuple[str, Any, int]]:
    """Orders as tests/integration/test_store_transform.py makes them: about half active."""
    return [
        (
            f"o{i:05d}",
            {
                "active": rng.random() < 0.5,
                "courier": f"c-{rng.randrange(20)}",
                "total": rng.randrange(1, 500),
                "address": "x" * rng.randrange(10, 60),
                "items": [i, i + 1],
            },
            1_700_000_000_000 + i,
        )
        for i in range(n)
    ]


def test_duckdb_counts_active_orders_per_courier_as_items_does(tmp_path: Path) -> None:
    path = _store(tmp_path / "s", _orders(random.Random(7), 5_000))
    with ReadOnlyStore(path) as store:
        expected_counts = Counter(v["courier"] for _, v in store.items() if v["active"])
        expected_totals = Counter()
        for _, v in store.items(prefix="o01"):
            expected_totals[v["courier"]] += v["total"] if v["active"] else 0
        con = duckdb.connect()
        # The JSON text, read with DuckDB's JSON functions, over batches smaller than the store.
        con.register("orders", store.to_arrow(batch_rows=700))
        counts = con.sql(
            "select value->>'$.courier' as courier, count(*) from orders "
            "where (value->>'$.active')::boolean group by courier"
        ).fetchall()
        assert dict(counts) == dict(expected_counts) and len(counts) == 20
        # The same as a struct of the caller's fields, over a prefix.
        fields = pa.schema(
            [("active", pa.bool_()), ("courier", pa.string()), ("total", pa.int64())]
        )
        con.register("early", store.to_arrow(prefix="o01", schema=fields))
        totals = con.sql(
            "select value.courier, sum(value.total) from early where value.active group by 1"
        ).fetchall()
        assert dict(totals) == {c: t for c, t in expected_totals.items() if t}
