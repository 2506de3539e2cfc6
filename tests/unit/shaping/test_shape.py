"""A declared transform (fields.Shape): its C code (_shape.h) gives the bytes of its Python
function for every document it is sure of, over random documents of every JSON kind written
compactly, with white space, escapes, exponents and repeated names; it is sure of every
compact document without those; a declaration that cannot be one is refused; another
declaration rebuilds the store."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from globalstore.config import StoreConfig
from globalstore.converters import ValueFormats
from globalstore.errors import ConfigurationError
from globalstore.shaping.fields import Shape, native_shape
from globalstore.shaping.transform import Transformer, meta_entries, rebuild_reason
from globalstore.storage.meta import K_TRANSFORM_SHAPE, Meta

SHAPES = [
    Shape(fields=["a", "b", "c"]),
    Shape(where={"s": ["x", "y"]}),
    Shape(fields=["c", "a"], where={"s": "x", "n.ok": [True, None]}),
    Shape(where={"f": False}),
]


def _scalar(rng: random.Random) -> Any:
    return rng.choice([
        "x", "y", "é日", "q\"uote", "back\\slash", "tab\t", "", "/", "\u2028",
        0, -3, 17, 2**40, 0.5, -0.0, 1234.56, 1e-7, 3e20, 1 / 3,
        True, False, None,
    ])  # fmt: skip


def _json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.15:
        return [_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    if depth < 3 and roll < 0.3:
        return {rng.choice("abcnsf"): _json(rng, depth + 1) for _ in range(rng.randrange(4))}
    return _scalar(rng)


def _document(rng: random.Random) -> bytes:
    body: dict[str, Any] = {}
    for _ in range(rng.randrange(7)):
        name = rng.choice(["a", "b", "c", "s", "n", "f", "z"])
        body[name] = rng.choice(["x", "y", "z"]) if name == "s" else _json(rng)
    if rng.random() < 0.3:
        body["n"] = {"ok": rng.choice([True, False, None, 1])}
    roll = rng.random()
    if roll < 0.6:
        return orjson.dumps(body)
    if roll < 0.75:
        return json.dumps(body, indent=rng.choice([None, 1])).encode()  # \u escapes, spaces
    if roll < 0.85:  # a repeated name
        return orjson.dumps(body)[:-1] + (b',"a":1}' if body else b'"a":2,"a":1}')
    if roll < 0.9:
        return rng.choice([b"[1]", b'"s"', b"7", b"null", b"not json", b'{"a":1'])
    return orjson.dumps(body).replace(b".5", b".50").replace(b"0.0", b"0e0")


def _python(shape: Shape, doc: bytes) -> bytes | str | None:
    """What the function stores: its bytes, None (deleted), or why not."""
    try:
        value = orjson.loads(doc)
    except orjson.JSONDecodeError:
        return "not JSON"
    try:
        out = shape("k", value)
    except TypeError:
        return "raises"
    return None if out is None else orjson.dumps(out)


@pytest.mark.parametrize("seed", range(4))
def test_the_c_code_stores_what_the_function_stores(seed: int) -> None:
    assert native_shape is not None  # built here
    rng = random.Random(seed)
    sure = 0
    for _ in range(3_000):
        doc = _document(rng)
        for shape in SHAPES:
            got = native_shape(doc, shape.spec())
            if got is False:
                continue
            sure += 1
            assert got == _python(shape, doc), (shape, doc)
    assert sure > 3_000  # of 12,000


def test_it_is_sure_of_compact_documents_without_escapes_or_exponents() -> None:
    assert native_shape is not None
    doc = orjson.dumps({"a": [1, 2.5, None, {"x": "é"}], "s": "x", "b": -7, "n": {"ok": True}})
    for shape in SHAPES:
        assert native_shape(doc, shape.spec()) == _python(shape, doc)
    assert native_shape(doc, SHAPES[0].spec()) == b'{"a":[1,2.5,null,{"x":"\xc3\xa9"}],"b":-7}'
    assert native_shape(doc, SHAPES[3].spec()) is None  # no f: the key goes


def test_a_transformer_shapes_in_c_and_in_python_alike() -> None:
    shape = Shape(fields=["a"], where={"s": "x"})
    transformer = Transformer(shape, ValueFormats(), "t")
    assert transformer.spec is not None
    assert transformer.shape(b"k", b'{"s":"x","a":1}', 1) == b'{"a":1}'  # in C
    assert transformer.shape(b"k", b'{"s":"x","a":1e1}', 1) == b'{"a":10.0}'  # in Python
    assert transformer.shape(b"k", b'{"s":"y","a":1}', 1) is None
    with pytest.raises(TypeError, match="shapes a JSON object"):
        transformer.shape(b"k", b"[1]", 1)


@pytest.mark.parametrize(
    ("fields", "where", "message"),
    [
        (None, None, "give one"),
        ("a", None, "a list of field names"),
        (["a.b"], None, "top-level field names"),
        (["a", "a"], None, "given twice"),
        (None, {"a..b": "x"}, "a JSON field's path"),
        (None, {"a": [1]}, "values are strings, True, False or None"),
    ],
)
def test_a_declaration_that_cannot_be_one_is_refused(fields: Any, where: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Shape(fields=fields, where=where)


def test_another_declaration_or_a_function_rebuilds(tmp_path: Any) -> None:
    declared = StoreConfig("t", "x:1", tmp_path, transform=Shape(fields=["a"]))
    entries = meta_entries(declared)
    meta = Meta(layout=1, transform_version=1, transform_format=1)
    meta.transform_shape = entries[K_TRANSFORM_SHAPE].decode()
    assert rebuild_reason(meta, declared) is None
    other = StoreConfig("t", "x:1", tmp_path, transform=Shape(fields=["b"]))
    assert "not {" in str(rebuild_reason(meta, other))
    function = StoreConfig("t", "x:1", tmp_path, transform=lambda k, v: v)
    assert "not a transform function" in str(rebuild_reason(meta, function))


def test_numbers_are_copied_only_as_orjson_writes_them() -> None:
    assert native_shape is not None
    rng, spec, copied = random.Random(5), Shape(fields=["a"]).spec(), 0
    texts = ["0", "-0", "0.0", "-0.0", "1.0", "1.50", "0.0001", "0.00001", "1e5", "-7"]
    for _ in range(20_000):
        whole = rng.choice(["0", str(rng.randrange(1, 10 ** rng.randrange(1, 9)))])
        fraction = "0" * rng.randrange(5) + str(rng.randrange(10 ** rng.randrange(1, 7)))
        texts.append(rng.choice(["", "-"]) + whole + "." + fraction + "0" * rng.randrange(2))
    for text in texts:
        doc = b'{"a":' + text.encode() + b"}"
        got = native_shape(doc, spec)
        if got is not False:
            copied += 1
            assert got == orjson.dumps({"a": orjson.loads(text)}), text
    assert copied > 5_000  # the others: a 0 too many, an exponent, more than 15 digits


def test_floats_as_repr_writes_them_and_long_integers_are_copied() -> None:
    """A float of 16 or 17 digits (a mean, a ratio: what an aggregation writes) is copied when
    its text is repr's; a text of as many digits that is not (not the shortest, not the
    closest, a digit too many) goes to the function; so does an integer past 18 digits."""
    assert native_shape is not None
    rng, spec = random.Random(9), Shape(fields=["a"]).spec()
    copied, unsure = 0, 0
    texts = ["0.30000000000000004", "0.30000000000000005", "0.1000000000000000055511151231257827"]
    for _ in range(20_000):
        x = rng.uniform(-1, 1) * 10 ** rng.randrange(-4, 16)
        texts.append(repr(x))  # 1e-4 up to 1e16: repr writes no exponent
        texts.append(repr(x) + rng.choice("0123456789"))  # reads as x or its neighbour
        texts.append(str(rng.randrange(10 ** rng.randrange(15, 21))))
    for text in texts:
        doc = b'{"a":' + text.encode() + b"}"
        got = native_shape(doc, spec)
        if got is False:
            unsure += 1
        else:
            copied += 1
            assert got == orjson.dumps({"a": orjson.loads(text)}), text
    assert copied > 30_000 and unsure > 15_000  # repr's texts copied, most others not
