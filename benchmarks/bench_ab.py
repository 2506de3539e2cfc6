"""Two checkouts of this project side by side: cold restore rate and produce→visible latency
of each, alternating in one run on one broker, so a restructuring can show it costs nothing.
With --snapshot, also each checkout's `globalstore serve` as a snapshot peer: the whole
GET /v1/snapshot stream read and discarded, and a new instance's boot from it (after one
uncounted send per peer, so a peer that keeps what it learned from a send shows it).

    git worktree add /tmp/before HEAD~3 && (cd /tmp/before && python setup.py build_ext --inplace)
    python benchmarks/bench_ab.py /tmp/before . --keys 1000000 --rounds 3

--after-value-cache N gives the after checkout's stores ValueCache(entries=N): what the
cache's invalidation costs a restore and a follow. --shuffled produces the restore's keys in
a random order (as most topics' producers write them) instead of in increasing order.

Each measurement runs in a child process whose PYTHONPATH is that checkout, so the child
imports that checkout's globalstore (and its C restore loop, if built there). Prints the
medians of each and after/before ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from globalstore import GlobalStore, StoreListener

CHILD_TIMEOUT_S = 1800
CACHE_ENV = "BENCH_AB_VALUE_CACHE"  # entries of the after checkout's value cache, if any
HISTORY_ENV = "BENCH_AB_HISTORY"  # the stores' history window in seconds, if any


class _Restored(StoreListener):
    def __init__(self) -> None:
        self.records, self.seconds = 0, 0.0

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        self.records, self.seconds = total_records, seconds


def settings() -> dict[str, Any]:
    """The store settings this child was given (a history window; --after-value-cache, for
    the after checkout alone: the before one may not have the setting)."""
    out: dict[str, Any] = {}
    if history := os.environ.get(HISTORY_ENV):
        out["history"] = float(history)
    if entries := os.environ.get(CACHE_ENV):
        from globalstore import ValueCache  # noqa: PLC0415 - only the after checkout has it

        out["value_cache"] = ValueCache(entries=int(entries))
    return out


def restore_rate(bootstrap: str, topic: str, path: Path) -> dict[str, float]:
    """Records/s of a cold restore, start() call to ready."""
    listener = _Restored()
    began = time.perf_counter()
    store = GlobalStore(topic, bootstrap, path, listeners=[listener], **settings())
    store.start(timeout=900)
    seconds = time.perf_counter() - began
    store.close()
    return {"rate": listener.records / seconds, "records": listener.records}


def follow_latency(bootstrap: str, topic: str, path: Path, samples: int) -> dict[str, float]:
    """p50 and p99 seconds from produce() to store.wait_for(that offset) returning."""
    from bench_store import visible_by_wait_for  # noqa: PLC0415 - needs the child's globalstore

    with GlobalStore(topic, bootstrap, path, **settings()).start(timeout=120) as store:
        seen = sorted(visible_by_wait_for(store, bootstrap, topic, samples))
    return {"p50": seen[len(seen) // 2], "p99": seen[int(0.99 * (len(seen) - 1))]}


def child(args: list[str]) -> None:
    kind, bootstrap, topic, path = args[:4]
    if kind == "restore":
        result = restore_rate(bootstrap, topic, Path(path))
    elif kind == "boot":
        from bench_serve import boot_seconds  # noqa: PLC0415 - needs the child's globalstore

        result = {"seconds": boot_seconds(bootstrap, topic, Path(path), args[4])}
    else:
        result = follow_latency(bootstrap, topic, Path(path), int(args[4]))
    print(json.dumps(result))


def checkout_env(checkout: Path) -> dict[str, str]:
    """This environment, importing globalstore from `checkout`, and the benchmarks' helpers
    from the checkout's own benchmarks/ first (they import its modules by their paths then),
    this one's after."""
    path = [str(checkout), str(checkout / "benchmarks"), str(Path(__file__).parent)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def measure(
    checkout: Path, *args: str, cache: int = 0, history: float | None = None
) -> dict[str, Any]:
    env = {
        **checkout_env(checkout),
        CACHE_ENV: str(cache or ""),
        HISTORY_ENV: "" if history is None else str(history),
    }
    # -P: without it the child's sys.path starts with this script's directory, so it would
    # import this checkout's benchmark helpers (and through them modules `checkout` may lack).
    command = [sys.executable, "-P", __file__, "--child", *args]
    done = subprocess.run(
        command, env=env, cwd=checkout, capture_output=True, text=True,
        timeout=CHILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: {' '.join(args[:1])} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    from bench_store import create_topic, fill_topic, log  # noqa: PLC0415

    from globalstore.localkafka import LocalKafka, free_port  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=1000, help="produce→visible samples")
    parser.add_argument("--snapshot", action="store_true", help="also stream and boot from peers")
    parser.add_argument(
        "--after-value-cache", type=int, default=0, help="the after stores' ValueCache entries"
    )
    parser.add_argument(
        "--shuffled", action="store_true", help="produce the restore's keys in a random order"
    )
    args = parser.parse_args()
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        work = Path(tmp)
        with LocalKafka(port=free_port(), data_dir=work / "kafka") as broker:
            restore_topic, follow_topic = (f"ab-{uuid.uuid4().hex[:8]}" for _ in range(2))
            for topic in (restore_topic, follow_topic):
                create_topic(broker.bootstrap, topic)
            fill_topic(
                broker.bootstrap, restore_topic, args.keys, "small batches", shuffled=args.shuffled
            )
            for r in range(args.rounds):
                # before, after; then after, before: neither always goes first.
                order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
                for label in order:
                    where = checkouts[label]
                    path = str(work / f"{label}-{r}")
                    cache = args.after_value_cache if label == "after" else 0
                    got = measure(
                        where, "restore", broker.bootstrap, restore_topic, path, cache=cache
                    )
                    results.setdefault((label, "restore rec/s"), []).append(got["rate"])
                    got = measure(
                        where, "follow", broker.bootstrap, follow_topic, path + "-f",
                        str(args.samples), cache=cache,
                    )  # fmt: skip
                    results.setdefault((label, "follow p50 ms"), []).append(1000 * got["p50"])
                    results.setdefault((label, "follow p99 ms"), []).append(1000 * got["p99"])
                log(f"round {r + 1}: " + json.dumps({f"{k[0]} {k[1]}": round(v[-1], 2)
                                                      for k, v in results.items()}))  # fmt: skip
            if args.snapshot:
                snapshot_rounds(broker.bootstrap, restore_topic, checkouts, work, args.rounds,
                                results)  # fmt: skip
    print("| measure | before | after | after / before | raw before | raw after |")
    print("|---|---|---|---|---|---|")
    for measure_name in dict.fromkeys(name for _, name in results):
        before, after = results[("before", measure_name)], results[("after", measure_name)]
        b, a = statistics.median(before), statistics.median(after)
        raw = [", ".join(f"{x:,.4g}" for x in xs) for xs in (before, after)]
        print(f"| {measure_name} | {b:,.4g} | {a:,.4g} | {a / b:.3f} | {raw[0]} | {raw[1]} |")


def snapshot_rounds(
    bootstrap: str,
    topic: str,
    checkouts: dict[str, Path],
    work: Path,
    rounds: int,
    results: dict[tuple[str, str], list[float]],
) -> None:
    """Each checkout's peer on a store of `topic`; one uncounted stream from each, then per
    round, alternating which goes first, a stream from each and a boot from each."""
    from bench_serve import serve, snapshot_stream  # noqa: PLC0415

    from globalstore.localkafka import free_port  # noqa: PLC0415

    ports = {label: free_port() for label in checkouts}
    with contextlib.ExitStack() as peers:
        for label, where in checkouts.items():
            proc = serve(bootstrap, topic, work / f"peer-{label}", ports[label],
                         env=checkout_env(where))  # fmt: skip
            peers.callback(proc.wait, 120)
            peers.callback(proc.terminate)
            snapshot_stream(ports[label])
        for r in range(rounds):
            order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
            for label in order:
                seconds = snapshot_stream(ports[label])[1]
                results.setdefault((label, "snapshot stream s"), []).append(seconds)
                url = f"http://127.0.0.1:{ports[label]}/v1/snapshot"
                path = str(work / f"boot-{label}-{r}")
                got = measure(checkouts[label], "boot", bootstrap, topic, path, url)
                results.setdefault((label, "boot s"), []).append(got["seconds"])
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
