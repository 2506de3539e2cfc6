"""Point reads without a broker: get, get_many and their parts, on a store directory filled
through the storage API with the records of bench_store.py's topic, then read with
ReadOnlyStore (the query code every store face shares).

    python benchmarks/bench_reads.py                          # 1M keys, 5 rounds
    python benchmarks/bench_reads.py --keys 100000 --rounds 3 # a quick check
    python benchmarks/bench_reads.py --path /tmp/s --rounds 7 # keep the store, reuse it

Workloads, each on a store (so a block cache) of its own, in turn in every round:
  cold        keys drawn at random from all the keys, new ones every round: the block cache
              holds a fraction of the values, so most reads decompress a block read from a
              table file (what bench_store.py measures);
  cold, mmap  the same with mmap_reads=True;
  hot         keys drawn at random from --hot keys read once before: all blocks cached.
The reads: get_many, a loop of get, and their parts without the query layer (rocksdict's
get and multi-get on bytes keys, codec.decode alone on values already read). Batch by batch,
every read takes its turn in a rotating order, on keys of its own. Then bench_store.py's
comparison: get_many and the loop on the same keys, which goes first alternating.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from bench_store import key_of, multi_get_vs_loop, value_of, value_padding

from globalstore import ReadOnlyStore, codec
from globalstore.codec import format_headers
from globalstore.config import RocksDBOptions
from globalstore.storage import Storage

BATCH = 20_000  # records per applied batch while filling
GET_MANY = "get_many"
LOOP = "loop of get"
MULTI = "  rocksdict multi-get alone"
RAW_GET = "  rocksdict get alone"
DECODE = "  codec.decode alone"
RATIO = "get_many / loop of get"
CEILING = "most get_many / loop can be: loop / (multi-get + decode)"
SAME_KEYS = "get_many / loop on the same keys (bench_store.py's way)"
COLD = "cold: random over all keys"
COLD_MMAP = "cold, mmap reads"
HOT = "hot: random over the hot set"
Rates = dict[str, list[float]]


def fill(path: Path, keys: int) -> None:
    """A store of `keys` keys of ~200-byte values, written in key order in bulk batches as a
    restore writes them (which writes them partition by partition, so its first table
    files overlap more until compacted), then counted and marked restored."""
    storage = Storage(path)
    storage.initialise("bench-reads", None, 1)
    pad, headers = value_padding(), format_headers()
    for start in range(0, keys, BATCH):
        records = [
            (key_of(i).encode(), orjson.dumps(value_of(i, pad)), headers, i % 6, i // 6, i)
            for i in range(start, min(keys, start + BATCH))
        ]
        storage.apply(records, {}, False, 1, list_keys=False)
    storage.begin_recount()
    while storage.recount_step(100_000) is None:
        pass
    storage.mark_restored(int(time.time() * 1000))
    storage.close()


class Reads:
    """The timed reads of one batch of keys, each a function of (str keys, bytes keys)."""

    def __init__(self, store: ReadOnlyStore) -> None:
        get, get_many, db = store.get, store.get_many, store._ready_storage()._db
        raw_get, decode, topic = db.get, codec.decode, store.topic
        self.store, self.db = store, db
        self.timed: dict[str, Callable[[list[str], list[bytes]], object]] = {
            GET_MANY: lambda keys, _: get_many(keys),
            LOOP: lambda keys, _: [get(k) for k in keys],
            MULTI: lambda _, encoded: db.get(encoded),
            RAW_GET: lambda _, encoded: [raw_get(k) for k in encoded],
            # The values are fetched (untimed) in `untimed` below.
            DECODE: lambda _, encoded: [
                decode(r, k, topic) for r, k in zip(self.raws, encoded, strict=True)
            ],
        }
        self.raws: list[bytes] = []

    def untimed(self, name: str, encoded: list[bytes]) -> None:
        if name == DECODE:
            self.raws = self.db.get(encoded)


def measure(reads: Reads, draw: Callable[[], str], args: argparse.Namespace, out: Rates) -> None:
    """One round into `out` (name -> keys/s, wall and thread CPU). Batch by batch every read
    in turn, in an order that rotates, each on keys of its own from `draw`: one read never
    finds the blocks another just cached, and a moment of load hits all alike."""
    names = list(reads.timed)
    wall, cpu = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
    for b in range(args.reads // args.batch):
        for name in names[b % len(names) :] + names[: b % len(names)]:
            keys = [draw() for _ in range(args.batch)]
            encoded = [k.encode() for k in keys]
            reads.untimed(name, encoded)
            began, began_cpu = time.perf_counter(), time.thread_time()
            reads.timed[name](keys, encoded)
            wall[name] += time.perf_counter() - began
            cpu[name] += time.thread_time() - began_cpu
    n = args.reads // args.batch * args.batch
    for name in names:
        out.setdefault(name, []).append(n / wall[name])
    out.setdefault(RATIO, []).append(wall[LOOP] / wall[GET_MANY])
    # get_many's floor: its multi-get plus its decoding. No get_many can gain more over the
    # loop than the loop's time over theirs.
    out.setdefault(CEILING, []).append(wall[LOOP] / (wall[MULTI] + wall[DECODE]))
    out.setdefault(f"{LOOP}, per thread-CPU second", []).append(n / cpu[LOOP])
    out.setdefault(f"{GET_MANY}, per thread-CPU second", []).append(n / cpu[GET_MANY])
    many, loop = multi_get_vs_loop(reads.store, [draw() for _ in range(args.reads)], args.batch)
    out.setdefault(SAME_KEYS, []).append(many / loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reads", type=int, default=100_000, help="keys read per measurement")
    parser.add_argument("--batch", type=int, default=100, help="keys per get_many call")
    parser.add_argument("--hot", type=int, default=5_000, help="keys in the hot set")
    parser.add_argument("--path", type=Path, help="store directory: filled if empty, kept")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-reads-"))
    path = args.path or workdir / "store"
    try:
        if not (path / "db" / "CURRENT").exists():
            began = time.perf_counter()
            fill(path, args.keys)
            print(f"filled {args.keys:,} keys in {time.perf_counter() - began:.1f} s")
        run(args, path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, path: Path) -> None:
    rng = random.Random(1)
    hot = [key_of(rng.randrange(args.keys)) for _ in range(args.hot)]

    def cold() -> str:
        return key_of(rng.randrange(args.keys))

    def warm() -> str:
        return rng.choice(hot)

    # A store (so a block cache) per workload: the cold reads would evict the hot set.
    workloads = {
        COLD: (Reads(ReadOnlyStore(path)), cold),
        COLD_MMAP: (Reads(ReadOnlyStore(path, RocksDBOptions(mmap_reads=True))), cold),
        HOT: (Reads(ReadOnlyStore(path)), warm),
    }
    results: dict[str, Rates] = {w: {} for w in workloads}
    try:
        for k in hot:  # the hot set's blocks into its block cache
            workloads[HOT][0].store.get(k)
        for r in range(args.rounds):
            for workload, (reads, draw) in workloads.items():
                measure(reads, draw, args, results[workload])
            print(f"round {r + 1}, loop of get: " + ", ".join(
                f"{w} {v[LOOP][-1]:,.0f}/s" for w, v in results.items()
            ), flush=True)  # fmt: skip
    finally:
        for reads, _ in workloads.values():
            reads.store.close()
    print(
        f"\n{args.keys:,} keys of ~200-byte JSON values (lz4, 64 MB block cache), "
        f"{args.batch} random keys per get_many call, {args.reads:,} keys per read and round, "
        f"hot set {args.hot:,} keys; medians of {args.rounds} rounds; {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| keys/s (ratio) | " + " | ".join(workloads) + " |")
    print("|---" * (len(workloads) + 1) + "|")
    for name in results[COLD]:
        print(f"| {name} | " + " | ".join(_cell(results[w][name]) for w in workloads) + " |")


def _cell(xs: list[float]) -> str:
    m = statistics.median(xs)
    return f"{m:.2f} x" if m < 10 else f"{m:,.0f}"


if __name__ == "__main__":
    main()
