"""What the order of a restore batch's puts costs RocksDB (docs/performance.md, "History"):
bare rocksdict with the store's options, `--keys` random keys with ~220-byte values written in
batches of 10k without the write-ahead log, as a bulk restore writes them, each batch's puts
in record order or in key order; the batch's building (its sort included, in Python here)
and its `db.write` timed apart, µs a record, the two orders alternating.

    python benchmarks/bench_write_order.py --keys 500000 --rounds 3
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import rocksdict

from globalstore.codec import HEADER
from globalstore.config import RocksDBOptions
from globalstore.storage.options import rocksdb_options

BATCH = 10_000
VALUE = b"x" * 200


def one_run(where: Path, keys: int, sort: bool, seed: int) -> tuple[float, float]:
    """(building, db.write) µs a record of writing `keys` keys in random order."""
    db = rocksdict.Rdict(str(where), options=rocksdb_options(RocksDBOptions()))
    unlogged = rocksdict.WriteOptions()
    unlogged.disable_wal = True
    order = list(range(keys))
    random.Random(seed).shuffle(order)
    building = writing = 0.0
    for first in range(0, keys, BATCH):
        batch = order[first : first + BATCH]
        records = [(b"key-%08d" % i, HEADER.pack(2, 1, 0, 0, first + n) + VALUE)
                   for n, i in enumerate(batch)]  # fmt: skip
        began = time.perf_counter()
        if sort:
            records.sort()
        wb = rocksdict.WriteBatch(raw_mode=True)
        put = wb.put
        for key, value in records:
            put(key, value)
        built = time.perf_counter()
        db.write(wb, unlogged)
        building += built - began
        writing += time.perf_counter() - built
    db.close()
    return building / keys * 1e6, writing / keys * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for r in range(args.rounds):
        for sort in (False, True) if r % 2 == 0 else (True, False):
            with tempfile.TemporaryDirectory(prefix="bench-write-order-") as tmp:
                build, write = one_run(Path(tmp), args.keys, sort, seed=r)
            name = "key order" if sort else "record order"
            print(f"round {r + 1} {name:12s}: build {build:.2f}, db.write {write:.2f} µs a record")


if __name__ == "__main__":
    main()
