# Types of the C module built from _fields.c (see fields.py for its use).

def values(
    raws: list[bytes | None], paths: tuple[tuple[bytes, ...], ...], fmt: int, /
) -> tuple[list[frozenset[bytes] | None], ...]: ...
