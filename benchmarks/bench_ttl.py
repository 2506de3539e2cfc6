"""What a ttl costs (docs/store.md, "Time to live"), on real RocksDB and without a broker:
Storage.apply per record without a ttl, with one in a bulk restore (no time entries: built
after) and with one indexing as it writes (following, an exact restore); the build after a
bulk restore per key; a point lookup (what get() reads with, before it decodes: the copy's
lookup, which hides an expired value) and an items() scan per key, over a ReadOnlyStore of
the files written. Each kind of store is made anew every round, the rounds alternate,
and the minimum and median of each are printed.

    python benchmarks/bench_ttl.py --keys 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from globalstore.shaping import ttl
from globalstore.storage import Record, Storage
from globalstore.storage.rules import WriteRules
from globalstore.stores.read_only_store import ReadOnlyStore

BATCH = 10_000
VALUE = b'{"courier": "c-17", "items": ["a", "b"], "total": 12.5, "note": "' + b"x" * 120 + b'"}'
MODES = {"none": None, "bulk": True, "inline": False}  # {mode: bulk restore, None: no ttl}


def _records(keys: int, start: int, now: int) -> list[list[Record]]:
    return [
        [(b"k%09d" % i, VALUE, None, 0, start + i, now) for i in range(b, min(b + BATCH, keys))]
        for b in range(0, keys, BATCH)
    ]


def _per(n: int, run: Callable[[], Any]) -> float:
    """µs per item of `run` over `n` items."""
    t0 = time.perf_counter()
    run()
    return (time.perf_counter() - t0) / n * 1e6


def one_round(keys: int, mode: str, where: Path) -> dict[str, float]:
    bulk = MODES[mode]
    ttl_ms = None if bulk is None else 3_600_000
    storage = Storage(where, rules=WriteRules(ttl_ms=ttl_ms))
    storage.initialise("t", None, 1)
    storage.load(storage.read_meta())
    storage.define(bulk=bool(bulk), now_ms=int(time.time() * 1000))
    purge = None if ttl_ms is None else ttl.Purge(storage.time, ttl_ms)
    now = int(time.time() * 1000)
    out = {}
    for name, start in (("apply new", 0), ("apply overwrite", keys)):
        batches = _records(keys, start, now)
        out[name] = _per(keys, lambda b=batches: [storage.apply(r, {}, False, now) for r in b])
    if purge is not None and storage.state.time_cursor is not None:
        purge.idle = 0.0

        def build() -> None:
            while storage.state.time_cursor is not None:
                purge.step()

        out["build"] = _per(keys, build)
    storage.close()
    with ReadOnlyStore(where) as view:
        sample = [b"k%09d" % i for i in range(0, keys, 3)]
        lookup = view.source.copy().lookup  # what get() reads with, before it decodes
        out["lookup"] = _per(len(sample), lambda: [lookup(k) for k in sample])
        out["items"] = _per(keys, lambda: sum(1 for _ in view.items()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in MODES:
                for name, us in one_round(args.keys, mode, Path(tmp) / f"{mode}-{r}").items():
                    results.setdefault((name, mode), []).append(us)
    for (name, mode), values in sorted(results.items()):
        print(f"{name:16} {mode:7} min {min(values):6.2f} µs  median "
              f"{statistics.median(values):6.2f} µs")  # fmt: skip


if __name__ == "__main__":
    main()
