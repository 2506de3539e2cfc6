"""The floor of an indexed restore: what RocksDB alone (rocksdict, no globalstore code) takes
to write the entries a restore with two declared indexes writes, against the values alone,
and ways of writing them other than the store's.

    python benchmarks/bench_index_floor.py                 # 300,000 orders, 5 rounds
    python benchmarks/bench_index_floor.py --keys 1000000 --rounds 3

Each record is bench_shape.py's order (276 bytes of JSON behind the 22-byte header) and, for
the indexed variants, the four entries of two indexes (by customer, by status): an entry
and a reverse entry each, in the index column family, as storage/keys.py lays them out. The
entries are made (and sorted, where a variant sorts them) before the clock starts; what is
timed is rocksdict's Python calls (as any writer through rocksdict makes them: the
WriteBatch's or an SstFileWriter's puts) and RocksDB's work, 5,000 records a batch, without
the write-ahead log, with the store's RocksDB options (storage/options.py). Variants
alternate round by round, each into a new database:

    values                    the values only: a plain restore's RocksDB work
    values + 4 entries        the entries in the order of the records
    values + 4 sorted         the entries of each batch in key order (what _entries.c writes)
    values + 2 sorted         the same without the reverse entries: the floor of a layout
                              that would keep none
    4 sorted, no compression or filter
                              the index column family without lz4 and without Bloom filters
    4 sorted, vector memtable the index column family on a vector memtable (inserts append;
                              a read of the memtable sorts a copy of it)
    4 sorted, SST a batch     each batch's entries written to a table file (SstFileWriter)
                              and ingested into the index column family after the batch
    4 sorted, SST a chunk     the entries of --chunk records sorted together, one table file
                              each chunk, ingested

Each variant prints its records/s (median) and share of the values-only rate, then the rate
with the final flush of the memtables counted too, then, right after the writes (before that
flush), the time of --gets random gets of reverse entries (a follower's reads; all hit) and
of --finds scans of one customer's 20 entries (find's), per call.

With --follow, the floor of a follower's write instead: into a database holding the records
and the entries of two indexes without reverse entries, batches of --batch updates of
random keys, each moving the key to another customer and status (as bench_freshness.py's
updates do), written with the write-ahead log as a follower writes: the value alone, or the
value and, per index, the old entry's delete and the new entry's put, in key order. What is
timed is the WriteBatch's puts and rocksdict's write, which holds the GIL (a thread spinning
beside a write of 600,000 puts got 1 % of its turns): per record, the time the follower
takes from readers for RocksDB alone.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import rocksdict
from bench_shape import order

from globalstore.config import RocksDBOptions
from globalstore.storage.options import rocksdb_options

BATCH = 5_000
Entry = tuple[bytes, bytes]
ONE, TWO = b"e" + struct.pack(">I", 1), b"e" + struct.pack(">I", 2)
RONE, RTWO = b"k" + struct.pack(">I", 1), b"k" + struct.pack(">I", 2)


class Data:
    """The records, their entries per batch in each arrangement, and the keys read."""

    def __init__(self, keys: int, chunk: int) -> None:
        self.values: list[Entry] = []
        self.batches: list[list[Entry]] = []  # the 4 entries of each record, record order
        customers = []
        for i in range(keys):
            o = order(i)
            key, customer, status = str(i).encode(), o["customer"].encode(), o["status"].encode()
            self.values.append((key, bytes(22) + orjson.dumps(o)))
            if i % BATCH == 0:
                self.batches.append([])
            self.batches[-1] += [
                (ONE + customer + b"\x00" + key, b""),
                (RONE + key, customer),
                (TWO + status + b"\x00" + key, b""),
                (RTWO + key, status),
            ]
            customers.append(customer)
        self.sorted = [sorted(b) for b in self.batches]
        self.forward = [[e for e in b if e[0][:1] == b"e"] for b in self.sorted]
        per = max(1, chunk // BATCH)
        self.chunks = [
            sorted(e for b in self.batches[n : n + per] for e in b)
            for n in range(0, len(self.batches), per)
        ]
        self.per_chunk = per
        rng = random.Random(7)
        self.reads = [RONE + str(rng.randrange(keys)).encode() for _ in range(1000)]
        self.finds = [ONE + customers[rng.randrange(keys)] + b"\x00" for _ in range(200)]


def open_db(path: Path, family: str) -> rocksdict.Rdict:
    """A new database with the store's options, but for the index family's `family`
    ("store": the same; "vector": a vector memtable; "plain": no compression, no filter)."""
    opts = rocksdb_options(RocksDBOptions())
    index = rocksdb_options(RocksDBOptions())
    if family == "vector":  # a memtable other than the skip list takes one writer at a time
        opts.set_allow_concurrent_memtable_write(False)
        index.set_memtable_factory(rocksdict.MemtableFactory.vector())
    elif family == "plain":
        index = rocksdb_options(RocksDBOptions(compression="none", bloom_bits_per_key=0))
    return rocksdict.Rdict(str(path), options=opts, column_families={"meta": opts, "index": index})


def in_batch(entries: list[list[Entry]] | None) -> Callable[..., None]:
    """Write each batch's values and its `entries` (None: none) in one WriteBatch."""

    def write(db: rocksdict.Rdict, values: list[Entry], n: int, tmp: Path) -> None:
        wb = rocksdict.WriteBatch(raw_mode=True)
        for key, value in values:
            wb.put(key, value)
        if entries is not None:
            index = db.get_column_family_handle("index")
            for key, value in entries[n]:
                wb.put(key, value, index)
        db.write(wb, UNLOGGED)

    return write


def ingested(files: list[list[Entry]], per: int, batches: int) -> Callable[..., None]:
    """Write each batch's values in a WriteBatch; after every `per` batches (and the last of
    `batches`), `files`' next list of sorted entries into a table file, ingested into the
    index column family."""

    def write(db: rocksdict.Rdict, values: list[Entry], n: int, tmp: Path) -> None:
        wb = rocksdict.WriteBatch(raw_mode=True)
        for key, value in values:
            wb.put(key, value)
        db.write(wb, UNLOGGED)
        if n % per == per - 1 or n == batches - 1:
            path = str(tmp / f"{n}.sst")
            sst = rocksdict.SstFileWriter(options=rocksdb_options(RocksDBOptions()))
            sst.open(path)
            for key, value in files[n // per]:
                sst[key] = value
            sst.finish()
            move = rocksdict.IngestExternalFileOptions()
            move.set_move_files(True)
            db.get_column_family("index").ingest_external_file([path], move)

    return write


UNLOGGED = rocksdict.WriteOptions()
UNLOGGED.disable_wal = True


def variants(d: Data) -> dict[str, tuple[str, Callable[..., None]]]:
    """{name: (the index family's options (open_db), the write of one batch)}"""
    batches = len(d.batches)
    return {
        "values": ("store", in_batch(None)),
        "values + 4 entries": ("store", in_batch(d.batches)),
        "values + 4 sorted": ("store", in_batch(d.sorted)),
        "values + 2 sorted": ("store", in_batch(d.forward)),
        "4 sorted, no compression or filter": ("plain", in_batch(d.sorted)),
        "4 sorted, vector memtable": ("vector", in_batch(d.sorted)),
        "4 sorted, SST a batch": ("store", ingested(d.sorted, 1, batches)),
        "4 sorted, SST a chunk": ("store", ingested(d.chunks, d.per_chunk, batches)),
    }


def run(d: Data, family: str, write: Callable[..., None], path: Path) -> list[float]:
    """[records/s, records/s with the final flush, µs a get, µs a find] into a new database."""
    db = open_db(path, family)
    ssts = path.with_suffix(".ssts")
    ssts.mkdir()
    began = time.perf_counter()
    for n, start in enumerate(range(0, len(d.values), BATCH)):
        write(db, d.values[start : start + BATCH], n, ssts)
    wrote = time.perf_counter()
    index = db.get_column_family("index")
    for key in d.reads:
        index.get(key)
    got = time.perf_counter()
    for prefix in d.finds:
        it = index.iter()
        it.seek(prefix)
        for _ in range(20):
            if not it.valid():
                break
            it.next()
        del it
    found = time.perf_counter()
    db.flush()
    index.flush()
    flushed = time.perf_counter() - (found - wrote)
    del index
    db.close()
    shutil.rmtree(path)
    shutil.rmtree(ssts)
    n = len(d.values)
    return [
        n / (wrote - began),
        n / (flushed - began),
        (got - wrote) / len(d.reads) * 1e6,
        (found - got) / len(d.finds) * 1e6,
    ]


def follow_floor(keys: int, batch: int, batches: int, rounds: int) -> None:
    """--follow: µs a record of a follower's write, the value alone against it with the
    four entry changes of two indexes, alternating batch by batch in one database."""
    rng = random.Random(11)
    current: list[tuple[bytes, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        db = open_db(Path(tmp) / "db", "store")
        index = db.get_column_family_handle("index")
        for start in range(0, keys, BATCH):
            wb = rocksdict.WriteBatch(raw_mode=True)
            for i in range(start, min(keys, start + BATCH)):
                o, key = order(i), str(i).encode()
                c, st = o["customer"].encode(), o["status"].encode()
                current.append((c, st))
                wb.put(key, bytes(22) + orjson.dumps(o))
                wb.put(ONE + c + b"\x00" + key, b"", index)
                wb.put(TWO + st + b"\x00" + key, b"", index)
            db.write(wb, UNLOGGED)
        spent: dict[str, list[float]] = {"value": [], "value + 4 entry changes": []}
        for _ in range(rounds):
            for name, rows in spent.items():
                took = 0.0
                for _ in range(batches):
                    took += _follow_batch(db, index, current, rng, batch, name != "value")
                rows.append(took / (batch * batches) * 1e6)
        del index
        db.close()
    plain = statistics.median(spent["value"])
    print(f"{keys:,} keys, batches of {batch}, {batches} a round, {rounds} rounds; medians")
    for name, rows in spent.items():
        med = statistics.median(rows)
        raw = ", ".join(f"{x:.2f}" for x in rows)
        print(f"{name}: {med:.2f} us a record ({med / plain:.2f}x the value alone) [{raw}]")


def _follow_batch(
    db: rocksdict.Rdict,
    index: rocksdict.ColumnFamily,
    current: list[tuple[bytes, bytes]],
    rng: random.Random,
    batch: int,
    entries: bool,
) -> float:
    """Seconds of one follow batch of `batch` updates: its WriteBatch filled and written."""
    updates = []
    for i in rng.sample(range(len(current)), batch):
        o = order(rng.randrange(len(current)))
        updates.append((i, o["customer"].encode(), o["status"].encode(), orjson.dumps(o)))
    changes: list[tuple[bytes, bytes | None]] = []
    if entries:
        for i, c, st, _ in updates:
            key, (old_c, old_st) = str(i).encode(), current[i]
            changes += [(ONE + old_c + b"\x00" + key, None), (ONE + c + b"\x00" + key, b"")]
            changes += [(TWO + old_st + b"\x00" + key, None), (TWO + st + b"\x00" + key, b"")]
            current[i] = (c, st)
        changes.sort(key=lambda change: change[0])
    began = time.perf_counter()
    wb = rocksdict.WriteBatch(raw_mode=True)
    for i, _, _, value in sorted(updates):
        wb.put(str(i).encode(), bytes(22) + value)
    for key, value in changes:
        if value is None:
            wb.delete(key, index)
        else:
            wb.put(key, value, index)
    db.write(wb)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=250_000, help="records a table file")
    parser.add_argument("--only", help="variant names, separated by | (default: all)")
    parser.add_argument("--follow", action="store_true", help="a follower's write instead")
    parser.add_argument("--batch", type=int, default=150, help="updates a follow batch")
    parser.add_argument("--batches", type=int, default=200, help="follow batches a round")
    args = parser.parse_args()
    if args.follow:
        follow_floor(args.keys, args.batch, args.batches, args.rounds)
        return
    d = Data(args.keys, args.chunk)
    chosen = variants(d)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split("|") or k == "values"}
    got: dict[str, list[list[float]]] = {v: [] for v in chosen}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        for r in range(args.rounds):
            for name, (family, write) in chosen.items():
                got[name].append(run(d, family, write, Path(tmp) / f"{r}-{len(got[name])}"))
    med = {
        name: [statistics.median(x) for x in zip(*rows, strict=True)] for name, rows in got.items()
    }
    plain, plain_flushed = med["values"][0], med["values"][1]
    print(f"{args.keys:,} records, {args.rounds} rounds, medians; raw rates in brackets")
    for name, (rate, flushed, get, find) in med.items():
        extra = (1 / rate - 1 / plain) * 1e6
        extra_flushed = (1 / flushed - 1 / plain_flushed) * 1e6
        raw = ", ".join(f"{row[0] / 1000:.0f}k" for row in got[name])
        print(
            f"{name}: {rate:,.0f} rec/s, {rate / plain:.0%} of values alone, +{extra:.2f} us a "
            f"record [{raw}]; with the flush {flushed:,.0f} rec/s, {flushed / plain_flushed:.0%}, "
            f"+{extra_flushed:.2f} us; get {get:.1f} us, find {find:.1f} us"
        )


if __name__ == "__main__":
    main()
