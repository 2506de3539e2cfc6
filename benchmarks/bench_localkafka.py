"""Measure the local broker: cold jar resolve, and warm start-to-ready / stop times.

    python benchmarks/bench_localkafka.py [--rounds 5] [--skip-cold]

Cold = an empty cache directory, so the jars come from Maven Central (network-bound).
Warm = jars cached, data directory already formatted: what `globalstore kafka start` costs
on a developer's machine after the first time. Prints medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from globalstore.localkafka import DEFAULT_KAFKA_VERSION, LocalKafka, free_port
from globalstore.localkafka.jars import resolve_kafka_jars


def cold_resolve_seconds(version: str) -> float:
    with tempfile.TemporaryDirectory() as cache:
        return resolve_kafka_jars(version, Path(cache)).seconds


def warm_cycles(version: str, rounds: int) -> tuple[list[float], list[float]]:
    starts: list[float] = []
    stops: list[float] = []
    with tempfile.TemporaryDirectory() as data:
        broker = LocalKafka(port=free_port(), data_dir=data, version=version)
        broker.start()  # formats the data directory and warms the page cache: not counted
        broker.stop()
        for _ in range(rounds):
            began = time.monotonic()
            broker.start()
            starts.append(time.monotonic() - began)
            began = time.monotonic()
            broker.stop()
            stops.append(time.monotonic() - began)
    return starts, stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-cold", action="store_true", help="do not hit Maven Central")
    args = parser.parse_args()

    if not args.skip_cold:
        print(f"cold resolve of Kafka {args.version}: {cold_resolve_seconds(args.version):.1f} s")
    starts, stops = warm_cycles(args.version, args.rounds)
    print(f"warm start-to-ready, median of {args.rounds}: {statistics.median(starts):.2f} s "
          f"(min {min(starts):.2f}, max {max(starts):.2f})")  # fmt: skip
    print(f"stop (SIGTERM to exit), median of {args.rounds}: {statistics.median(stops):.2f} s")


if __name__ == "__main__":
    main()
