"""Arrow export benchmark: how fast store.to_arrow() streams a store, against items(), and
what a DuckDB query over it costs. No broker: the store is written through the storage layer.

    python benchmarks/bench_arrow.py                  # 1M keys, 3 runs
    python benchmarks/bench_arrow.py --keys 100000 --runs 1

It is a script, not a test: it prints what it measured. Each run reads the whole store once
per variant, the variants alternating which goes first; medians of --runs. CPU time of this
process is printed beside wall time, since the machine may be shared. Peak Arrow memory is
what pyarrow's allocator held at most while the batches were read one at a time.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from globalstore import ReadOnlyStore
from globalstore.codec import format_headers
from globalstore.read.arrow import BATCH_ROWS
from globalstore.storage import Storage

COUNT_SQL = (
    "select value->>'$.courier' as courier, count(*) from orders "
    "where (value->>'$.active')::boolean group by courier"
)
FIELDS = pa.schema([("active", pa.bool_()), ("courier", pa.string()), ("total", pa.int64())])


def build(path: Path, keys: int) -> None:
    """A store of `keys` orders (~150-byte JSON values), written 50,000 records a batch."""
    rng = random.Random(1)
    storage = Storage(path)
    storage.initialise("orders", None, 1)
    storage.load(storage.read_meta())
    headers = format_headers()
    for first in range(0, keys, 50_000):
        records = []
        for i in range(first, min(keys, first + 50_000)):
            order = {
                "active": rng.random() < 0.5,
                "courier": f"c-{rng.randrange(20)}",
                "total": rng.randrange(1, 500),
                "address": "x" * rng.randrange(10, 60),
                "items": [i, i + 1],
            }
            ts = 1_700_000_000_000 + i
            records.append((f"o{i:08d}".encode(), orjson.dumps(order), headers, 0, i, ts))
        storage.apply(records, {}, False, 1)
    storage.close()


def _items(store: ReadOnlyStore) -> tuple[int, int]:
    return sum(1 for _ in store.items()), 0


def _export(
    store: ReadOnlyStore, schema: pa.Schema | None, batch_rows: int = BATCH_ROWS
) -> tuple[int, int]:
    rows, peak = 0, 0
    for batch in store.to_arrow(schema=schema, batch_rows=batch_rows):
        rows += batch.num_rows
        peak = max(peak, pa.total_allocated_bytes())
    return rows, peak


def _duckdb(store: ReadOnlyStore) -> tuple[int, int]:
    con = duckdb.connect()
    con.register("orders", store.to_arrow())
    found = con.sql(COUNT_SQL).fetchall()
    return sum(count for _, count in found), 0


VARIANTS: dict[str, Callable[[ReadOnlyStore], tuple[int, int]]] = {
    "items() (decoded dicts)": _items,
    "to_arrow() (JSON text)": lambda store: _export(store, None),
    "to_arrow(batch_rows=10_000)": lambda store: _export(store, None, 10_000),
    "to_arrow(schema=3 fields)": lambda store: _export(store, FIELDS),
    "DuckDB count per courier over to_arrow()": _duckdb,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"pyarrow {pa.__version__}, duckdb {duckdb.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        began = time.perf_counter()
        build(path, args.keys)
        print(f"built {args.keys:,} keys in {time.perf_counter() - began:.1f} s")
        walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
        cpus: dict[str, list[float]] = {name: [] for name in VARIANTS}
        peaks: dict[str, int] = dict.fromkeys(VARIANTS, 0)
        names = list(VARIANTS)
        with ReadOnlyStore(path) as store:
            _export(store, None)  # imports pyarrow.compute and warms the files' pages
            for run in range(args.runs):
                for name in names[run % len(names) :] + names[: run % len(names)]:
                    wall, cpu = time.perf_counter(), time.process_time()
                    rows, peak = VARIANTS[name](store)
                    walls[name].append(time.perf_counter() - wall)
                    cpus[name].append(time.process_time() - cpu)
                    peaks[name] = max(peaks[name], peak)
                    if name.startswith("DuckDB"):
                        assert rows == sum(1 for _, v in store.items() if v["active"])
                    else:
                        assert rows == args.keys, (name, rows)
        print(f"{'variant':44} {'rows/s (wall)':>14} {'rows/s (CPU)':>14} {'peak Arrow MB':>14}")
        for name in VARIANTS:
            wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            peak = f"{peaks[name] / 2**20:.1f}" if peaks[name] else "-"
            print(f"{name:44} {args.keys / wall:>14,.0f} {args.keys / cpu:>14,.0f} {peak:>14}")


if __name__ == "__main__":
    main()
