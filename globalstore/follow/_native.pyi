# Types of the C module built from _native.c (see native.py for its use).
from collections.abc import Callable
from typing import Any

def load(path: str) -> None: ...
def json_certain(value: bytes) -> bool: ...

class Restorer:
    def __init__(
        self,
        conf: dict[str, str],
        topic: str,
        offsets: dict[int, int],
        capacity: int,
        layout: int,
        declared_name: str,
        declared_value: bytes,
        current_format: int,
        undeclared_format: int,
        value_format: Callable[[Any], int],
    ) -> None: ...
    def fill(
        self,
        put: Callable[[bytes, bytes], object],
        delete: Callable[..., object],
        nexts: dict[int, int],
        events: list[tuple[int, int, int, str, bool]],
        skipped: list[tuple[int, int, bytes]],
        timeout_ms: int,
        limit: int = ...,
        first: bool = ...,
        checked: tuple[Callable[[bytes, bytes], object], set[bytes], dict[bytes, bool]]
        | None = None,
        shape: tuple[tuple[object, ...], int, Callable[[bytes, bytes], object]] | None = None,
        record_deletes: bool = False,
    ) -> int: ...
    def held(self) -> int: ...
    def oldest(self) -> int | None: ...
    def stats(self) -> str | None: ...
    def close(self) -> None: ...
