"""The floor of an indexed restore: what RocksDB alone (rocksdict, no globalstore code) takes
to write the entries a restore with two declared indexes writes, against the values alone.

    python benchmarks/bench_index_floor.py                 # 300,000 orders, 5 rounds
    python benchmarks/bench_index_floor.py --keys 1000000

Each record is bench_shape.py's order (276 bytes of JSON behind the 22-byte header) and, for
the indexed variants, the four entries of two indexes (by customer, by status): an entry
and a reverse entry each, in the index column family, as storage/keys.py lays them out. The
entries are made before the clock starts; what is timed is the WriteBatch puts (rocksdict's
Python calls, as any writer through rocksdict makes them) and the writes, 5,000 records a
batch, without the write-ahead log, with the store's RocksDB options (storage/options.py).
Variants alternate round by round, each into a new database:

    values                  the values only: a plain restore's RocksDB work
    values + 4 entries      the entries in the order of the records
    values + 4 sorted       the entries of each batch in key order (what _entries.c writes)

It prints each variant's records/s (median) and the share of the values-only rate.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path

import orjson
import rocksdict
from bench_shape import order

from globalstore.config import RocksDBOptions
from globalstore.storage.options import rocksdb_options

BATCH = 5_000
VARIANTS = ("values", "values + 4 entries", "values + 4 sorted")

Entry = tuple[bytes, bytes]


def records(keys: int) -> tuple[list[Entry], list[list[Entry]]]:
    """Each order's (key, stored value), and the index entries of each batch of them."""
    one, two = b"e" + struct.pack(">I", 1), b"e" + struct.pack(">I", 2)
    rone, rtwo = b"k" + struct.pack(">I", 1), b"k" + struct.pack(">I", 2)
    values, entries = [], []
    for i in range(keys):
        o = order(i)
        key, customer, status = str(i).encode(), o["customer"].encode(), o["status"].encode()
        values.append((key, bytes(22) + orjson.dumps(o)))
        if i % BATCH == 0:
            entries.append([])
        entries[-1] += [
            (one + customer + b"\x00" + key, b""),
            (rone + key, customer),
            (two + status + b"\x00" + key, b""),
            (rtwo + key, status),
        ]
    return values, entries


def write(variant: str, values: list[Entry], entries: list[list[Entry]], path: Path) -> float:
    """Records/s writing `values` (and the batches' `entries`) into a new database."""
    opts = rocksdb_options(RocksDBOptions())
    db = rocksdict.Rdict(str(path), options=opts, column_families={"meta": opts, "index": opts})
    index = db.get_column_family_handle("index")
    unlogged = rocksdict.WriteOptions()
    unlogged.disable_wal = True
    batches = [sorted(e) if variant == "values + 4 sorted" else e for e in entries]
    with_entries = variant != "values"
    began = time.perf_counter()
    for n, start in enumerate(range(0, len(values), BATCH)):
        wb = rocksdict.WriteBatch(raw_mode=True)
        for key, value in values[start : start + BATCH]:
            wb.put(key, value)
        if with_entries:
            for key, value in batches[n]:
                wb.put(key, value, index)
        db.write(wb, unlogged)
    rate = len(values) / (time.perf_counter() - began)
    db.close()
    shutil.rmtree(path)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    values, entries = records(args.keys)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        for r in range(args.rounds):
            for variant in VARIANTS:
                rates[variant].append(write(variant, values, entries, Path(tmp) / f"{r}-{variant}"))
    plain = statistics.median(rates["values"])
    print(f"{args.keys:,} records, {args.rounds} rounds, medians; raw values in brackets")
    for variant, got in rates.items():
        rate = statistics.median(got)
        extra = (1 / rate - 1 / plain) * 1e6
        print(
            f"{variant}: {rate:,.0f} rec/s, {rate / plain:.0%} of values alone, "
            f"+{extra:.2f} us a record  [{', '.join(f'{x / 1000:.0f}k' for x in got)}]"
        )


if __name__ == "__main__":
    main()
