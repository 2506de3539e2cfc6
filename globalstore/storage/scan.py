"""Walking the keys of a point-in-time iterator: scan bounds, and the background key count."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


def bounded(
    items: Iterable[tuple[bytes, bytes]], lower: bytes | None, upper: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """The items with lower <= key < upper, of an iterator that starts at the right end:
    ReadOptions' iterate bounds are unreliable in rocksdict 0.3.29."""
    if reverse:
        for key, value in items:
            if upper is not None and key >= upper:
                continue  # seek_for_prev lands on `upper` itself when it exists
            if lower is not None and key < lower:
                return
            yield key, value
    else:
        for key, value in items:
            if upper is not None and key >= upper:
                return
            yield key, value


@dataclass
class Recount:
    """A keys-only count over one point-in-time iterator, plus the exact changes applied
    since that iterator was created."""

    keys: Iterator[bytes]
    counted: int = 0
    delta: int = 0

    def step(self, chunk: int) -> int | None:
        """Count up to `chunk` more keys: the live keys once the iterator ends, else None."""
        seen = sum(1 for _ in itertools.islice(self.keys, chunk))
        self.counted += seen
        return None if seen == chunk else self.counted + self.delta
