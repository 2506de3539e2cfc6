"""Declared indexes: GlobalStore(indexes={"by_customer": "customer"}) names a JSON field
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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["NativeValues", "field_index", "native_values", "path_of"]

# (stored values, None for a deleted key; paths; current value format) -> per path, per value
# its index values, or None where the equivalent function must read it
NativeValues = Callable[
    [list[bytes | None], tuple[tuple[bytes, ...], ...], int],
    tuple[list[frozenset[bytes] | None], ...],
]
native_values: NativeValues | None
try:
    from globalstore.shaping import _fields

    native_values = _fields.values
except ImportError:  # built without its C extension: every value goes through field_index
    native_values = None


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
