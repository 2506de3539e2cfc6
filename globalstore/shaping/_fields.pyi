# Types of the C module built from _fields.c (see fields.py for its use).
from typing import Any

def values(
    raws: list[bytes | None], paths: tuple[tuple[bytes, ...], ...], fmt: int, /
) -> tuple[list[bytes | frozenset[bytes] | None], ...]: ...
def shape(doc: bytes, spec: tuple[Any, ...], /) -> bytes | bool | None: ...
