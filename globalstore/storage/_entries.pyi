# Types of the C module built from _entries.c (see keys.write_changes and
# index_defs.SecondaryIndexes for its use).
from collections.abc import Callable

def write_changes(
    entries: bytes,
    reverse: bytes,
    keys: list[bytes],
    news: list[bytes | frozenset[bytes]],
    get_many: Callable[[list[bytes]], list[bytes | None]],
    lookup: list[int] | None,
    encode: Callable[[frozenset[bytes]], bytes],
    put: Callable[..., object],
    delete: Callable[..., object],
    handle: object,
    /,
) -> int: ...
def write_entries(
    entries: bytes,
    keys: list[bytes],
    news: list[bytes | frozenset[bytes]],
    olds: list[bytes | frozenset[bytes] | None],
    put: Callable[..., object],
    delete: Callable[..., object],
    handle: object,
    /,
) -> int: ...
def move_deferred(
    deferred: list[tuple[bytes, int, int]],
    olds: list[bytes | None],
    put_version: Callable[..., object],
    handle: object,
    /,
) -> None: ...

class KeyFilter:
    def seen_then_add(self, keys: list[bytes], /) -> list[int]: ...
    def nbytes(self) -> int: ...

class Staging:
    def __init__(self, write: Callable[..., object], staged: dict[bytes, bytes | None]) -> None: ...
    def __call__(self, key: bytes, value: bytes = ..., /) -> object: ...

class Versioned:
    def __init__(
        self,
        write: Callable[..., object],
        put_version: Callable[..., object],
        handle: object,
        pending: dict[bytes, bytes | None],
        written: KeyFilter | None,
        deferred: list[tuple[bytes, int, int]],
    ) -> None: ...
    def __call__(self, key: bytes, *record: bytes | int) -> object: ...
