"""What a read of an index as of a time costs (docs/performance.md, "History"), on real
RocksDB and without a broker: a store with history and two indexes of the same field, one
declared ("courier", read in C) and one a function, each key written `--versions` times
(a courier of 100 each time); then, over the files, find() of one courier now and as of a
time in the middle of the versions, for each index, against items(as_of=t) over every key
(the scan a find as of a time makes). Medians over the rounds, each round a new store.

    python benchmarks/bench_find_as_of.py --keys 100000 --versions 5 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_history import HOUR_MS

from globalstore.config import StoreConfig
from globalstore.shaping.rules import write_rules
from globalstore.storage import Record, Storage
from globalstore.stores.read_only_store import ReadOnlyStore

BATCH = 10_000
COURIERS = 100
PAD = "x" * 120


def courier_fn(key: str, value: Any) -> str | None:
    """The function index: the same entries as the declared one."""
    courier = value.get("courier")
    return courier if isinstance(courier, str) else None


INDEXES: dict[str, Any] = {"declared": "courier", "function": courier_fn}


def _batch(keys: range, version: int, ts: int) -> list[Record]:
    """Version `version` of `keys`: key i's courier moves on by one each version."""
    return [
        (b"k%09d" % i, b'{"courier":"c-%d","note":"%s"}' % ((i + version) % COURIERS,
         PAD.encode()), None, 0, version * 10**9 + i, ts)
        for i in keys
    ]  # fmt: skip


def _write(where: Path, keys: int, versions: int, base: int) -> None:
    config = StoreConfig("t", "f:1", where, indexes=INDEXES)
    storage = Storage(where, rules=write_rules(config))
    storage.initialise("t", None, 1)
    storage.load(storage.read_meta())
    storage.define(bulk=False, now_ms=0)
    storage.history.define(2 * HOUR_MS, 0)
    for v in range(versions):
        for b in range(0, keys, BATCH):
            storage.apply(_batch(range(b, min(b + BATCH, keys)), v, base + v * 1000), {}, False, 1)
    storage.close()


def _timed(rows: Callable[..., Iterator[Any]], *args: Any, **kwargs: Any) -> tuple[float, int]:
    """Seconds to read every row `rows(*args, **kwargs)` gives, and how many."""
    t0 = time.perf_counter()
    n = sum(1 for _ in rows(*args, **kwargs))
    return time.perf_counter() - t0, n


def one_round(keys: int, versions: int, where: Path) -> dict[str, float]:
    base = int(time.time() * 1000) - HOUR_MS
    _write(where, keys, versions, base)
    middle = (base + versions // 2 * 1000) / 1000
    out: dict[str, float] = {}
    with ReadOnlyStore(where, indexes=INDEXES) as store:
        seconds, _ = _timed(store.items, as_of=middle)
        out["items(as_of) s"] = seconds
        for name in INDEXES:
            seconds, found = _timed(store.find, name, "c-7")
            out[f"find {name} now ms"] = seconds * 1000
            seconds, then = _timed(store.find, name, "c-7", as_of=middle)
            assert then == found == keys // COURIERS, (then, found)
            out[f"find {name} as_of s"] = seconds
            out[f"find {name} as_of µs/key"] = seconds / keys * 1e6
            out[f"find {name} as_of / items(as_of)"] = seconds / out["items(as_of) s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, value in one_round(args.keys, args.versions, Path(tmp) / f"{r}").items():
                results.setdefault(name, []).append(value)
    print(f"{args.keys} keys x {args.versions} versions, {args.rounds} rounds (medians)")
    for name, values in results.items():
        print(f"{name:36} {statistics.median(values):10.3f}   {values}")


if __name__ == "__main__":
    main()
