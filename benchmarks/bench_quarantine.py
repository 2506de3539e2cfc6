"""What invalid_values="quarantine" costs a cold restore: records/s of a plain store and of a
quarantining one over the same topic (keys with ~200-byte JSON values, then 1 % of them
overwritten with a value that is not JSON), on a fresh local broker, each restore into an
empty directory, the kinds alternating round by round (the order flips every round). Both
restore with the C loop; with --python also both with the Python loop.

    python benchmarks/bench_quarantine.py --keys 1000000 --rounds 4
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench_store import Counter, create_topic, fill_topic, key_of
from confluent_kafka import Producer

from globalstore import GlobalStore, StoreConfig
from globalstore.codec import encode_key, format_headers
from globalstore.config import OnInvalidValue

BAD = b'{"id": "not json'  # cut short: no JSON parser accepts it


def spoil(bootstrap: str, topic: str, keys: int, every: int) -> int:
    """Overwrite every `every`-th key with a value that is not JSON; how many were."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    headers = format_headers()
    for i in range(0, keys, every):
        producer.produce(topic, key=encode_key(key_of(i)), value=BAD, headers=headers)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("records left unacknowledged")
    return len(range(0, keys, every))


def restore(
    bootstrap: str, topic: str, path: Path, invalid: str, native: bool
) -> tuple[float, int]:
    """(records/s from start() to ready, keys quarantined) of a cold restore into `path`."""
    shutil.rmtree(path, ignore_errors=True)
    counter = Counter()
    config = StoreConfig(
        topic=topic, bootstrap_servers=bootstrap, path=path, invalid_values=OnInvalidValue(invalid),
        native_restore=native,
    )  # fmt: skip
    began = time.perf_counter()
    store = GlobalStore.from_config(config, listeners=[counter]).start(timeout=900)
    seconds = time.perf_counter() - began
    held = store.status().quarantined
    store.close()
    shutil.rmtree(path, ignore_errors=True)
    return counter.records / seconds, held


def main() -> None:
    from globalstore.localkafka import LocalKafka, free_port  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--python", action="store_true", help="also with the Python loop")
    args = parser.parse_args()
    kinds = [("store", True), ("quarantine", True)]
    if args.python:
        kinds += [("store", False), ("quarantine", False)]
    rates: dict[tuple[str, bool], list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="bench-quarantine-") as tmp:
        work = Path(tmp)
        with LocalKafka(port=free_port(), data_dir=work / "kafka") as broker:
            topic = f"quarantine-{uuid.uuid4().hex[:8]}"
            create_topic(broker.bootstrap, topic)
            fill_topic(broker.bootstrap, topic, args.keys, "small batches")
            bad = spoil(broker.bootstrap, topic, args.keys, 100)
            print(f"{args.keys:,} keys, then {bad:,} of them overwritten with a bad value")
            for r in range(args.rounds):
                for kind in kinds if r % 2 == 0 else list(reversed(kinds)):
                    rate, held = restore(broker.bootstrap, topic, work / "s", *kind)
                    assert held == (bad if kind[0] == "quarantine" else 0), held
                    rates[kind].append(rate)
                    loop = "C" if kind[1] else "Python"
                    print(f"round {r}: {kind[0]:10} {loop:6} loop {rate:10,.0f} records/s")
    for native in sorted({n for _, n in kinds}, reverse=True):
        plain = statistics.median(rates[("store", native)])
        held = statistics.median(rates[("quarantine", native)])
        loop = "C" if native else "Python"
        print(f"{loop} loop medians: plain {plain:,.0f}, quarantine {held:,.0f} records/s "
              f"({held / plain:.0%})")  # fmt: skip


if __name__ == "__main__":
    main()
