# Types of the C module built from _entries.c (see keys.write_changes for its use).
from collections.abc import Callable

def write_changes(
    entries: bytes,
    keys: list[bytes],
    reverse: list[bytes],
    news: list[frozenset[bytes]],
    olds: list[bytes | None],
    encode: Callable[[frozenset[bytes]], bytes],
    put: Callable[..., object],
    delete: Callable[..., object],
    handle: object,
    /,
) -> int: ...
