"""What history costs (docs/performance.md, "History"), on real RocksDB and without a
broker: Storage.apply per record with no history and with history (the Python loop both;
the versions written by _entries.Versioned where it is built), each key written `--versions`
times; then, over a ReadOnlyStore of the files written, get() now and get(as_of=t) per key
(median and p99, t in the middle of the versions), an items() scan now and as of t per key,
and the store's size on disk. Each kind of store is made anew every round in a process of
its own (whose peak RSS is printed), the rounds alternate, and the medians over the rounds
are printed.

The reads run right after the writes, on files RocksDB has not compacted yet (many level-0
files: a seek visits each). With --settled they run after a full compaction instead, as in
a store whose background compaction has caught up.

    python benchmarks/bench_history.py --keys 100000 --versions 10 --rounds 3 [--settled]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from globalstore.config import RocksDBOptions
from globalstore.storage import Record, Storage
from globalstore.storage.meta import INDEX_CF
from globalstore.storage.opening import open_rdict
from globalstore.stores.read_only_store import ReadOnlyStore

BATCH = 10_000
VALUE = b'{"courier": "c-17", "items": ["a", "b"], "total": 12.5, "note": "' + b"x" * 120 + b'"}'
HOUR_MS = 3_600_000


def _batches(keys: int, version: int, ts: int) -> list[list[Record]]:
    """Version `version` of every key, in batches: key i at offset version * keys + i."""
    first = version * keys
    return [
        [(b"k%09d" % i, VALUE, None, 0, first + i, ts) for i in range(b, min(b + BATCH, keys))]
        for b in range(0, keys, BATCH)
    ]


def _size(where: Path) -> float:
    return sum(f.stat().st_size for f in where.rglob("*") if f.is_file()) / 1e6


def _compact(where: Path) -> None:
    """Compact every column family of the store at `where` (closed), as RocksDB's background
    compaction does in time."""
    db, has_index = open_rdict(where, RocksDBOptions(), False, None)
    db.compact_range(None, None)
    if has_index:
        db.get_column_family(INDEX_CF).compact_range(None, None)
    db.close()


def one_round(
    keys: int, versions: int, history: bool, where: Path, settled: bool = False
) -> dict[str, float]:
    storage = Storage(where)
    storage.initialise("t", None, 1)
    storage.load(storage.read_meta())
    if history:
        storage.history.define(2 * HOUR_MS, 0)
    out: dict[str, float] = {}
    base = int(time.time() * 1000) - HOUR_MS  # inside the window
    began = time.perf_counter()
    for v in range(versions):  # version v written v seconds after the base
        for batch in _batches(keys, v, base + v * 1000):
            storage.apply(batch, {}, False, 1)
    out["apply µs/record"] = (time.perf_counter() - began) / (keys * versions) * 1e6
    storage.close()
    if settled:
        _compact(where)
    out["disk MB"] = _size(where)
    middle = (base + versions // 2 * 1000) / 1000
    with ReadOnlyStore(where) as view:
        sample = [f"k{i:09d}" for i in range(0, keys, max(1, keys // 20_000))]
        out["get now µs p50"], out["get now µs p99"] = _latencies(view.get, sample)
        if history:
            p50, p99 = _latencies(lambda k: view.get(k, as_of=middle), sample)
            out["get as_of µs p50"], out["get as_of µs p99"] = p50, p99
        t0 = time.perf_counter()
        assert sum(1 for _ in view.items()) == keys
        out["scan now µs/key"] = (time.perf_counter() - t0) / keys * 1e6
        if history:
            t0 = time.perf_counter()
            assert sum(1 for _ in view.items(as_of=middle)) == keys
            out["scan as_of µs/key"] = (time.perf_counter() - t0) / keys * 1e6
    return out


def _measured(
    keys: int, versions: int, history: bool, where: Path, settled: bool
) -> dict[str, float]:
    """one_round() and the peak RSS of the process that ran it."""
    out = one_round(keys, versions, history, where, settled)
    out["peak RSS MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _latencies(read: Callable[[str], object], sample: list[str]) -> tuple[float, float]:
    times = []
    for key in sample:
        t0 = time.perf_counter_ns()
        read(key)
        times.append((time.perf_counter_ns() - t0) / 1000)
    times.sort()
    return times[len(times) // 2], times[int(0.99 * (len(times) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settled", action="store_true", help="read after a full compaction")
    args = parser.parse_args()
    results: dict[tuple[str, str], list[float]] = {}
    fork = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for history in (False, True):
                mode = "history" if history else "plain"
                where = Path(tmp) / f"{mode}-{r}"
                # A process each, so that its peak RSS is its own.
                with ProcessPoolExecutor(1, mp_context=fork) as child:
                    measured = child.submit(
                        _measured, args.keys, args.versions, history, where, args.settled
                    ).result()
                for name, value in measured.items():
                    results.setdefault((name, mode), []).append(value)
    settled = ", settled" if args.settled else ""
    print(f"{args.keys} keys x {args.versions} versions, {args.rounds} rounds{settled} (medians)")
    for (name, mode), values in sorted(results.items()):
        print(f"{name:20} {mode:8} {statistics.median(values):10.2f}")


if __name__ == "__main__":
    main()
