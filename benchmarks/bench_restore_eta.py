"""How good the restore ETA is: a cold restore of a large topic, status() read every second,
and at each tenth of the way the finish its ETA foretold set against the actual finish.

    python benchmarks/bench_restore_eta.py                  # 5M keys on a fresh local broker
    python benchmarks/bench_restore_eta.py --keys 200000    # a quick check

Prints a table: at each tenth, seconds elapsed, the ETA then, the seconds actually left, and
the error as a share of the actual time left.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from bench_store import create_topic, fill_topic, log

from globalstore import GlobalStore
from globalstore.localkafka import LocalKafka, free_port

_POLL = 1.0  # seconds between two status() reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=5_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-eta-") as tmp:
        work = Path(tmp)
        with LocalKafka(port=free_port(), data_dir=work / "kafka") as broker:
            topic = f"eta-{uuid.uuid4().hex[:8]}"
            create_topic(broker.bootstrap, topic)
            log(f"filling {topic} with {args.keys:,} keys")
            fill_topic(broker.bootstrap, topic, args.keys, "small batches")
            samples, finished = restore(broker.bootstrap, topic, work / "store")
    print(f"restore of {args.keys:,} keys: {finished:.1f} s")
    print("| done | elapsed s | ETA s | actually left s | error |")
    print("|---|---|---|---|---|")
    shown = 0.1
    for elapsed, done, total, eta in samples:
        if total and done / total >= shown and eta is not None:
            left = finished - elapsed
            error = (eta - left) / left if left > 0 else 0.0
            print(f"| {done / total:.0%} | {elapsed:.1f} | {eta:.1f} | {left:.1f} | {error:+.1%} |")
            while done / total >= shown:
                shown += 0.1


def restore(
    bootstrap: str, topic: str, path: Path
) -> tuple[list[tuple[float, int, int, float | None]], float]:
    """(elapsed, done, total, ETA) every second of a cold restore, and its seconds to ready."""
    samples = []
    store = GlobalStore(topic, bootstrap, path)
    began = time.monotonic()
    store.start(timeout=3600, wait=False)
    try:
        while not (status := store.status()).ready:
            if status.last_error and status.failure:
                raise RuntimeError(status.last_error)
            p = status.progress
            if p is not None:
                samples.append((time.monotonic() - began, p.done, p.total, p.eta_seconds))
            time.sleep(_POLL)
        return samples, time.monotonic() - began
    finally:
        store.close()


if __name__ == "__main__":
    main()
