"""Declared indexes and a declared transform: what a store does to JSON values, named by their
fields instead of written as a function, so it runs in C.

Declared indexes: GlobalStore(indexes={"by_customer": "customer"}) names a JSON field
instead of giving a function. A dotted path reaches into objects ("customer.id"); a field
holding a string is indexed under it, a list under each string it holds; anything else (a
missing field, null, a number, an object) gives no entry.

field_index(path) is the Python function that does the same, entry for entry: an index
declared by its path writes exactly the bytes that index function would. The difference is
the cost: a declared index is read from the stored JSON in C (_fields.c), one call per batch,
with no decode of the value into Python objects and no Python call per value. A value the C
reader is not sure of (not JSON, a \\u escape in a name or a string, a value format older
than the current one, a NUL) goes through field_index, so both ways give the same entries
and count the same failures.

A declared transform: GlobalStore(transform=Shape(fields=["customer", "status"],
where={"status": ["new", "paid"]})) keeps the records whose field at each `where` path holds
one of the values listed (strings, True, False, None; compared with their type: True is not
1), the others delete their key, as a transform returning None does; and of those it keeps,
only the top-level `fields` named, in that order (a field a value lacks is left out). Either
may be left out. A Shape is the transform function it declares (Shape.__call__): a value
that is not a JSON object makes it raise TypeError, which counts as a transform failure
(the key stays as it was stored), and one that is not JSON is stored as it came, as with any
transform (transform.py). In C (_shape.h) it writes the same bytes from the value's own
bytes, in the C loop (no Python per record) and in the Python loop (one C call a record);
a value the C code is not sure of (an escape, a float with an exponent, white space inside a
kept value, an older value format) goes through __call__.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from globalstore.errors import ConfigurationError

__all__ = [
    "Allowed",
    "NativeShape",
    "NativeValues",
    "Shape",
    "field_index",
    "native_shape",
    "native_values",
    "path_of",
]

# (stored values, None for a deleted key; paths; current value format) -> per path, per value
# its index values (one as bytes, else a frozenset), or None where the equivalent function
# must read it
NativeValues = Callable[
    [list[bytes | None], tuple[tuple[bytes, ...], ...], int],
    tuple[list[bytes | frozenset[bytes] | None], ...],
]
# (JSON document, Shape.spec()) -> the bytes to store, None to delete the key, False: unsure
NativeShape = Callable[[bytes, tuple[Any, ...]], bytes | bool | None]
native_values: NativeValues | None
native_shape: NativeShape | None
try:
    from globalstore.shaping import _fields

    native_values, native_shape = _fields.values, _fields.shape
except ImportError:  # built without its C extension: every value goes through Python
    native_values = native_shape = None


def path_of(path: str) -> tuple[bytes, ...]:
    """A declared index's path as the C reader takes it: its names, as UTF-8 bytes."""
    return tuple(name.encode("utf-8") for name in path.split("."))


def field_index(path: str) -> Callable[[str, Any], str | list[str] | None]:
    """The index function a declared index `path` is equivalent to."""
    names = path.split(".")

    def index(key: str, value: Any) -> str | list[str] | None:
        for name in names:
            if not isinstance(value, dict):
                return None
            value = value.get(name)
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return [item for item in value if isinstance(item, str)]
        return None

    index.__qualname__ = f"field_index({path!r})"
    return index


Allowed = str | bool | None  # a value a `where` condition may list
_ABSENT: Any = object()


class Shape:
    """A declared transform (the module's docstring says what it does): give it as
    transform=Shape(fields=[...], where={path: values}); it is also the equivalent function."""

    def __init__(
        self,
        fields: Sequence[str] | None = None,
        where: Mapping[str, Allowed | Sequence[Allowed]] | None = None,
    ) -> None:
        if fields is None and not where:
            raise ConfigurationError("a Shape keeps fields, or records by a condition: give one")
        self.fields = None if fields is None else tuple(_field_names(fields))
        self.where = {path: _allowed(path, values) for path, values in (where or {}).items()}
        self._where = [(tuple(path.split(".")), allowed) for path, allowed in self.where.items()]

    def __call__(self, key: str, value: Any) -> Any:
        """The value to store for `value` (a decoded JSON value), None to delete the key."""
        if not isinstance(value, dict):
            raise TypeError(f"{self!r} shapes a JSON object, not a {type(value).__name__}")
        for names, allowed in self._where:
            found: Any = value
            for name in names:
                found = found.get(name, _ABSENT) if isinstance(found, dict) else _ABSENT
            if not any(type(found) is type(a) and found == a for a in allowed):
                return None
        if self.fields is None:
            return value
        return {name: value[name] for name in self.fields if name in value}

    def spec(self) -> tuple[Any, ...]:
        """The shape as the C code takes it (_shape.h): (names, keys, where)."""
        names = None if self.fields is None else tuple(n.encode("utf-8") for n in self.fields)
        keys = () if self.fields is None else tuple(orjson.dumps(n) + b":" for n in self.fields)
        where = tuple(
            (path_of(path), tuple(orjson.dumps(a) for a in allowed))
            for path, allowed in self.where.items()
        )
        return names, keys, where

    def declaration(self) -> str:
        """What it declares, as JSON: stored with the data, so another declaration rebuilds."""
        out = {"fields": self.fields, "where": self.where}
        return orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode("utf-8")

    def __repr__(self) -> str:
        return f"Shape(fields={self.fields!r}, where={self.where!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and other.declaration() == self.declaration()

    def __hash__(self) -> int:
        return hash(self.declaration())


def _field_names(fields: Iterable[str]) -> list[str]:
    if isinstance(fields, str):
        raise ConfigurationError(f"Shape fields: a list of field names, not the str {fields!r}")
    names = list(fields)
    for name in names:
        if not isinstance(name, str) or not name or "." in name:
            raise ConfigurationError(
                f"Shape fields: top-level field names (no '.': a nested field is kept with "
                f"its parent), not {name!r}"
            )
    if len(set(names)) < len(names):
        raise ConfigurationError(f"Shape fields: a name is given twice in {names!r}")
    return names


def _allowed(path: str, values: Allowed | Sequence[Allowed]) -> tuple[Allowed, ...]:
    if not isinstance(path, str) or not path or "" in path.split(".") or "\x00" in path:
        raise ConfigurationError(
            f"Shape where: a JSON field's path, non-empty names joined by '.', not {path!r}"
        )
    listed = (values,) if values is None or isinstance(values, str | bool) else tuple(values)
    for value in listed:
        if value is not None and not isinstance(value, str | bool):
            raise ConfigurationError(
                f"Shape where {path!r}: values are strings, True, False or None, not {value!r}"
            )
    return listed
