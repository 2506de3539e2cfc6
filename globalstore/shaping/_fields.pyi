# Types of the C module built from _fields.c (see fields.py for its use).

def values(
    raws: list[bytes | None], path: tuple[bytes, ...], fmt: int, /
) -> list[frozenset[bytes] | None]: ...
