"""Declared indexes (fields.py) on real RocksDB: a store whose indexes name JSON fields
writes, entry for entry, what a store with the equivalent index functions writes, through
both loops, over values that are not JSON, lack the field, hold escapes the C reader leaves
to Python, and keys that change or go; and it counts the same failures."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError
from globalstore.shaping import fields
from globalstore.shaping.fields import field_index
from globalstore.storage import Storage
from tests.unit.shaping.test_indexes import _open
from tests.unit.store_fakes import LikeTheCLoop, batch

DECLARED = {"by_customer": "customer", "by_tag": "order.tags"}
FUNCTIONS = {name: field_index(path) for name, path in DECLARED.items()}

ODD_VALUES = [
    "not json {",  # undecodable: a failure in every index, no entries
    '{"customer": "a\\nb", "order": {"tags": ["t\\"q", "t/\\/"]}}',  # escapes read in C
    '{"customer": "caf\\u00e9", "order": {"tags": ["\\ud83d\\ude00"]}}',  # \u: through Python
    '{"customer": "nul\\u0000", "order": {"tags": "one"}}',  # a NUL: the function fails
    '{"customer": null, "order": {"tags": [1, null, "x", ["y"], {"z": "w"}]}}',
    '{"customer": 7, "order": []}',
    '{"customer": "", "order": {"tags": []}}',
    '{"customer": "first", "customer": "last"}',  # a repeated name: the last one, as orjson
    '{"cust\\u006fmer": "escaped name", "order": {"ta\\u0067s": ["escaped"]}}',
    '["customer", "order"]',
    '"customer"',
    '{"order": {"tags": ["é", "日本"]}, "customer": "ünï"}',
    '{ "customer" : "spaced" , "order" : { "tags" : [ "a" , "b" ] } }',
    '{"order": {"customer": "nested", "tags": ["n"]}, "tags": ["top"]}',  # not top-level
    '[{"customer": "in a list"}, {"order": {"tags": ["x"]}}]',
    '{"customer": "kept", "z\\u0061": 1}',  # an escaped name after the field: unsure
    '{"customer": "a long value, longer than eight bytes \\n with an escape"}',
]


def _value(rng: random.Random) -> str | None:
    if rng.random() < 0.1:
        return None
    if rng.random() < 0.3:
        return rng.choice(ODD_VALUES)
    body: dict[str, Any] = {"id": rng.randrange(1000)}
    if rng.random() < 0.8:
        body["customer"] = f"c-{rng.randrange(20)}"
    if rng.random() < 0.8:
        body["order"] = {"tags": [f"t{rng.randrange(5)}" for _ in range(rng.randrange(4))]}
    return orjson.dumps(body).decode()


def _entries(storage: Storage) -> list[bytes]:
    index = storage._index
    assert index is not None
    return index.keys(b"", b"\xff" * 9, 10**9)


def _apply(storage: Storage, records: list[tuple[str, str | None]], start: int, i: int) -> None:
    """Batch `i`: the C loop's or the Python loop's, exact or bulk."""
    got = batch(*records, start=start)
    if i % 2:
        storage.apply_native(LikeTheCLoop(got), 0, i, exact_count=i % 4 == 1)
    else:
        storage.apply(got, {}, i % 4 == 0, i)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_declared_indexes_write_what_their_functions_write(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    declared, _ = _open(tmp_path / "declared", DECLARED)
    functions, _ = _open(tmp_path / "functions", FUNCTIONS)
    indexer = declared.indexes.indexer
    assert indexer is not None and indexer.native is not None  # the C reader is in use
    start = 0
    for i in range(12):
        records = [(f"k{rng.randrange(60)}", _value(rng)) for _ in range(rng.randrange(1, 40))]
        if i == 0:
            records += [(f"odd{n}", v) for n, v in enumerate(ODD_VALUES)]
        for storage in (declared, functions):
            _apply(storage, records, start, i)
        start += len(records)
        assert _entries(declared) == _entries(functions)
    assert len(_entries(declared)) > 50
    assert declared.indexes.indexer.failures == functions.indexes.indexer.failures  # type: ignore[union-attr]
    assert declared.indexes.indexer.failures["by_customer"] > 0  # type: ignore[union-attr]
    assert declared.state.index_entries == functions.state.index_entries
    declared.close()
    functions.close()


def test_the_c_reader_leaves_what_it_is_unsure_of_to_python() -> None:
    assert fields.native_values is not None
    header = b"\x01\x01" + bytes(20)
    raws: list[bytes | None] = [header + v.encode() for v in ODD_VALUES[:4]]
    raws += [b"\x01\x02" + bytes(20) + b"{}", None]  # an older format; a deleted key
    got = fields.native_values(raws, (fields.path_of("customer"), fields.path_of("order")), 1)
    assert got[0] == [None, b"a\nb", None, None, None, frozenset()]  # one value: its bytes
    assert got[1] == [None, frozenset(), None, frozenset(), None, frozenset()]


def test_the_equivalent_function() -> None:
    index = field_index("a.b")
    assert index("k", {"a": {"b": "x"}}) == "x"
    assert index("k", {"a": {"b": ["x", 1, "y"]}}) == ["x", "y"]
    assert index("k", {"a": "b"}) is None and index("k", {"a": {"b": 3}}) is None
    assert index("k", [1]) is None


@pytest.mark.parametrize("path", ["", "a..b", ".a", "a.", "a\x00b"])
def test_a_path_that_names_no_field_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(ConfigurationError, match="declared index names a JSON field"):
        StoreConfig("t", "x:1", tmp_path, indexes={"i": path})
