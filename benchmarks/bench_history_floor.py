"""The floor of a read as of a time: what RocksDB alone (rocksdict, no globalstore code) takes
to find each key's version as of t, against a read of the present.

    python benchmarks/bench_history_floor.py                  # 200,000 keys x 10 versions
    python benchmarks/bench_history_floor.py --keys 1000000

Two bare databases with the store's RocksDB options (storage/options.py), compacted before
the clock starts: "present" holds one ~200-byte JSON value a key; "versions" holds each key's
`--versions` versions, as history layout 2 lays them out (storage/history.py: the key, its
end, partition 0, the offset inverted: newest first). t is in the middle of the versions.

The as-of variants are told where the answer is: the benchmark seeks straight to the
version as of t and reads that one entry. No real read can do less with versions kept one
entry each (it has to find the answer, by stepping or seeking), so these are floors, not
designs:

    scan now            items() of "present", each value decoded (orjson): a scan now
    scan as of t        one iterator over "versions"; a key: seek to its answer, read it,
                        decode it
    walk every version  keys() of "versions", each key compared (no value read, no
                        decode): the other way to meet every key's answer
    get now             a point get and a decode, random keys
    get as of t         a new iterator, seek to the answer, read and decode it

It prints each figure (scans in µs a key, gets p50 / p99 in µs) and the best as-of scan's
share of the scan now.
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

from globalstore.config import RocksDBOptions
from globalstore.storage.options import rocksdb_options

_ORDER = struct.Struct(">IQ")
_TOP = 2**64 - 1
_END = b"\x00\x00"
_BATCH = 10_000


def _key(i: int) -> bytes:
    return b"key-%09d" % i


def _value(i: int, version: int) -> bytes:
    body = {"id": i, "version": version, "name": f"customer {i}", "pad": "x" * 140}
    return bytes(22) + orjson.dumps(body)


def _version_key(key: bytes, offset: int) -> bytes:
    return b"h" + key + _END + _ORDER.pack(0, _TOP - offset)


def _open(path: Path) -> rocksdict.Rdict:
    return rocksdict.Rdict(str(path), rocksdb_options(RocksDBOptions()))


Entries = Callable[[int], list[tuple[bytes, bytes]]]


def _fill(db: rocksdict.Rdict, entries: Entries, keys: int) -> None:
    for start in range(0, keys, _BATCH):
        wb = rocksdict.WriteBatch(raw_mode=True)
        for i in range(start, min(start + _BATCH, keys)):
            for k, v in entries(i):
                wb.put(k, v)
        db.write(wb)
    db.compact_range(None, None)


def build(root: Path, keys: int, versions: int) -> tuple[rocksdict.Rdict, rocksdict.Rdict]:
    present, history = _open(root / "present"), _open(root / "versions")
    _fill(present, lambda i: [(_key(i), _value(i, versions - 1))], keys)
    every = range(versions)
    _fill(history, lambda i: [(_version_key(_key(i), v), _value(i, v)) for v in every], keys)
    return present, history


def scan_now(present: rocksdict.Rdict) -> float:
    start, n = time.perf_counter(), 0
    for _, v in present.items():
        orjson.loads(v[22:])
        n += 1
    return (time.perf_counter() - start) / n * 1e6


def scan_as_of(history: rocksdict.Rdict, keys: int, answer: int) -> float:
    it = history.iter()
    start = time.perf_counter()
    for i in range(keys):
        it.seek(_version_key(_key(i), answer))
        orjson.loads(it.value()[22:])
    return (time.perf_counter() - start) / keys * 1e6


def walk_versions(history: rocksdict.Rdict, keys: int, answer: int) -> float:
    wanted, found = _ORDER.pack(0, _TOP - answer), 0
    start = time.perf_counter()
    for k in history.keys():  # noqa: SIM118 (an Rdict's iteration is not its keys())
        found += k.endswith(wanted)
    took = (time.perf_counter() - start) / keys * 1e6
    assert found == keys
    return took


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def get_now(present: rocksdict.Rdict, picks: list[int]) -> tuple[float, float]:
    took = []
    for i in picks:
        start = time.perf_counter()
        orjson.loads(present[_key(i)][22:])
        took.append((time.perf_counter() - start) * 1e6)
    return _percentiles(took)


def get_as_of(history: rocksdict.Rdict, picks: list[int], answer: int) -> tuple[float, float]:
    took = []
    for i in picks:
        start = time.perf_counter()
        it = history.iter()
        it.seek(_version_key(_key(i), answer))
        orjson.loads(it.value()[22:])
        del it
        took.append((time.perf_counter() - start) * 1e6)
    return _percentiles(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gets", type=int, default=20_000)
    args = parser.parse_args()
    answer = args.versions // 2
    root = Path(tempfile.mkdtemp(prefix="history-floor-"))
    try:
        present, history = build(root, args.keys, args.versions)
        picks = [random.randrange(args.keys) for _ in range(args.gets)]
        runs: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, figure in (
                ("scan now, µs a key", scan_now(present)),
                ("scan as of t, µs a key", scan_as_of(history, args.keys, answer)),
                ("walk every version, µs a key", walk_versions(history, args.keys, answer)),
            ):
                runs.setdefault(name, []).append(figure)
            for name, (p50, p99) in (
                ("get now", get_now(present, picks)),
                ("get as of t", get_as_of(history, picks, answer)),
            ):
                runs.setdefault(f"{name} p50 µs", []).append(p50)
                runs.setdefault(f"{name} p99 µs", []).append(p99)
        present.close()
        history.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.keys} keys x {args.versions} versions, {args.rounds} rounds (medians)")
    median = {name: statistics.median(values) for name, values in runs.items()}
    for name, value in median.items():
        print(f"{name:32} {value:8.2f}   ({', '.join(f'{v:.2f}' for v in runs[name])})")
    best = min(median["scan as of t, µs a key"], median["walk every version, µs a key"])
    print(f"best scan as of t at {median['scan now, µs a key'] / best:.0%} of a scan now")


if __name__ == "__main__":
    main()
