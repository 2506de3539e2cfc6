"""Stand-ins for consumed Kafka messages, for unit tests of the storage layer only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from globalstore.codec import format_headers


@dataclass
class Err:
    """A consumer event's error: only its code matters to the storage layer."""

    kind: int

    def code(self) -> int:
        return self.kind


@dataclass
class Msg:
    k: bytes | None
    v: bytes | None
    p: int = 0
    o: int = 0
    ts: int = 1_000
    err: Any = None
    fmt: int | None = None  # the value format header, if the record declares one

    def error(self) -> Any:
        return self.err

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def timestamp(self) -> tuple[int, int]:
        return (1, self.ts)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None if self.fmt is None else format_headers(self.fmt)


def batch(
    *records: tuple[str, str | None], p: int = 0, start: int = 0, fmt: int | None = None
) -> list[Msg]:
    return [
        Msg(k.encode(), None if v is None else v.encode(), p, start + i, fmt=fmt)
        for i, (k, v) in enumerate(records)
    ]
