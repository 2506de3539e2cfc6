"""What invalid_values="quarantine" costs a cold restore: records/s of a plain store and of a
quarantining one over the same topic (keys with ~200-byte JSON values, then 1 % of them
overwritten with a value that is not JSON), on a fresh local broker, each restore into an
empty directory, the kinds alternating round by round (the order flips every round). With
the C loop: plain; quarantining, values checked in C (the default; only those it is unsure of
go to the Python check); quarantining, every value checked in Python. With --python also
plain and quarantining with the Python loop.

    python benchmarks/bench_quarantine.py --keys 1000000 --rounds 4
"""

from __future__ import annotations

import argparse
import functools
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
from globalstore.storage import Storage

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


# label: (invalid_values, C loop, values the C loop finds certainly JSON skip the Python check)
KINDS = {
    "plain, C loop": ("store", True, True),
    "quarantine, C loop, C check": ("quarantine", True, True),
    "quarantine, C loop, Python check": ("quarantine", True, False),
}
PYTHON_KINDS = {
    "plain, Python loop": ("store", False, True),
    "quarantine, Python loop": ("quarantine", False, True),
}


def restore(
    bootstrap: str, topic: str, path: Path, invalid: str, native: bool, c_check: bool
) -> tuple[float, int]:
    """(records/s from start() to ready, keys quarantined) of a cold restore into `path`."""
    Storage.define = functools.partialmethod(_define, c_check=c_check)  # type: ignore[method-assign]
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


_DEFINE = Storage.define


def _define(storage: Storage, *, bulk: bool, now_ms: int, c_check: bool) -> None:
    """Storage.define, with the C loop's check turned off unless `c_check`."""
    _DEFINE(storage, bulk=bulk, now_ms=now_ms)
    if storage.quarantine is not None:
        storage.quarantine.plain = storage.quarantine.plain and c_check


def main() -> None:
    from globalstore.localkafka import LocalKafka, free_port  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--python", action="store_true", help="also with the Python loop")
    args = parser.parse_args()
    kinds = {**KINDS, **(PYTHON_KINDS if args.python else {})}
    rates: dict[str, list[float]] = {label: [] for label in kinds}
    with tempfile.TemporaryDirectory(prefix="bench-quarantine-") as tmp:
        work = Path(tmp)
        with LocalKafka(port=free_port(), data_dir=work / "kafka") as broker:
            topic = f"quarantine-{uuid.uuid4().hex[:8]}"
            create_topic(broker.bootstrap, topic)
            fill_topic(broker.bootstrap, topic, args.keys, "small batches")
            bad = spoil(broker.bootstrap, topic, args.keys, 100)
            print(f"{args.keys:,} keys, then {bad:,} of them overwritten with a bad value")
            for r in range(args.rounds):
                for label in kinds if r % 2 == 0 else list(reversed(kinds)):
                    invalid, native, c_check = kinds[label]
                    rate, held = restore(
                        broker.bootstrap, topic, work / "s", invalid, native, c_check
                    )
                    assert held == (bad if invalid == "quarantine" else 0), held
                    rates[label].append(rate)
                    print(f"round {r}: {label:34} {rate:10,.0f} records/s", flush=True)
    for label, got in rates.items():
        plain = rates["plain, C loop" if kinds[label][1] else "plain, Python loop"]
        ratio = statistics.median(got) / statistics.median(plain)
        print(
            f"median {label:34} {statistics.median(got):10,.0f} records/s, {ratio:.0%} "
            f"of plain with the same loop; rounds {', '.join(f'{x:,.0f}' for x in got)}"
        )


if __name__ == "__main__":
    main()
