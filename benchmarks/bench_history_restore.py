"""A cold restore from a real broker with history=seconds and without (docs/performance.md,
"History"): records/s from start() to ready, the stores alternating on one topic. Both
restore with the C loop when it is built; with history, each record's version is written in
C beside its value.

--split also times, a record, the store thread's calls a restore is made of (the C loop's
fill, which puts the values and their versions into the WriteBatch, the commit, and
apply_native around them), each wrapped in a timer (which costs a little of its own).

--shuffled produces the keys in a random order (a topic whose producers write keys in any
order) instead of in increasing order, whose restore batches come nearly sorted.

--checkouts "main=PATH;branch=PATH" restores in a child process importing each checkout
(bench_ab.py), both modes of each checkout alternating round by round, and prints each
one's history/plain ratio and the plain and history rates of each against the first.

    python benchmarks/bench_history_restore.py --keys 500000 --rounds 2 [--split] [--shuffled]
        [--checkouts "main=PATH;branch=PATH"]
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_ab import _Restored, measure
from bench_store import create_topic, fill_topic

from globalstore import GlobalStore
from globalstore.follow.native import NativeRestorer
from globalstore.localkafka import LocalKafka, free_port
from globalstore.storage import Storage

SPENT: collections.Counter[str] = collections.Counter()  # seconds in each timed call
TIMED = (
    (NativeRestorer, "fill", "fill"),
    (Storage, "commit", "commit"),
    (Storage, "apply_native", "apply_native"),
)


def timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    """`fn`, adding the seconds each call takes to SPENT[label]."""

    @functools.wraps(fn)
    def timer(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[label] += time.perf_counter() - began

    return timer


def restore_rate(bootstrap: str, topic: str, path: Path, history: float | None) -> float:
    """Records/s of a cold restore into `path`, start() call to ready."""
    listener = _Restored()
    began = time.perf_counter()
    with GlobalStore(topic, bootstrap, path, listeners=[listener], history=history).start(900):
        seconds = time.perf_counter() - began
    return listener.records / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--split", action="store_true", help="time the store thread's calls")
    parser.add_argument("--shuffled", action="store_true", help="produce the keys shuffled")
    parser.add_argument("--checkouts", help='"label=PATH;label=PATH": each in a child process')
    args = parser.parse_args()
    if args.checkouts:
        compare(args.keys, args.rounds, args.shuffled, _checkouts(args.checkouts))
        return
    if args.split:
        for owner, name, label in TIMED:
            setattr(owner, name, timed(getattr(owner, name), label))
    rates: dict[str, list[float]] = {"plain": [], "history": []}
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        work = Path(tmp)
        with LocalKafka(port=free_port(), data_dir=work / "kafka") as broker:
            topic = f"history-{uuid.uuid4().hex[:8]}"
            create_topic(broker.bootstrap, topic)
            fill_topic(broker.bootstrap, topic, args.keys, "small batches", shuffled=args.shuffled)
            for r in range(args.rounds):
                order = ["plain", "history"] if r % 2 == 0 else ["history", "plain"]
                for mode in order:
                    history = 3600.0 if mode == "history" else None
                    where = work / f"{mode}-{r}"
                    SPENT.clear()
                    rates[mode].append(restore_rate(broker.bootstrap, topic, where, history))
                    if args.split:
                        print(f"  {mode}, µs a record: " + ", ".join(
                            f"{label} {SPENT[label] / args.keys * 1e6:.2f}"
                            for _, _, label in TIMED if label in SPENT
                        ))  # fmt: skip
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{m} {v[-1]:,.0f} rec/s" for m, v in rates.items())
                )
    plain, history = statistics.median(rates["plain"]), statistics.median(rates["history"])
    print(f"{args.keys} keys, {args.rounds} rounds (medians): plain {plain:,.0f} rec/s, "
          f"history {history:,.0f} rec/s ({history / plain:.0%} of plain)")  # fmt: skip


def _checkouts(text: str) -> dict[str, Path]:
    """{label: path} of "label=PATH;label=PATH"."""
    pairs = (part.split("=", 1) for part in text.split(";") if part.strip())
    return {label.strip(): Path(path.strip()).resolve() for label, path in pairs}


def compare(keys: int, rounds: int, shuffled: bool, checkouts: dict[str, Path]) -> None:
    """Each checkout's plain and history restore, in child processes, alternating."""
    runs = [(label, mode) for label in checkouts for mode in ("plain", "history")]
    rates: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        work = Path(tmp)
        with LocalKafka(port=free_port(), data_dir=work / "kafka") as broker:
            topic = f"history-{uuid.uuid4().hex[:8]}"
            create_topic(broker.bootstrap, topic)
            fill_topic(broker.bootstrap, topic, keys, "small batches", shuffled=shuffled)
            for r in range(rounds):
                for label, mode in runs if r % 2 == 0 else list(reversed(runs)):
                    where = work / f"{label}-{mode}-{r}"
                    history = 3600.0 if mode == "history" else None
                    got = measure(checkouts[label], "restore", broker.bootstrap, topic,
                                  str(where), history=history)  # fmt: skip
                    rates[label, mode].append(got["rate"])
                print(f"round {r + 1}: " + ", ".join(
                    f"{label} {mode} {v[-1]:,.0f}" for (label, mode), v in rates.items()
                ) + " rec/s")  # fmt: skip
    medians = {run: statistics.median(v) for run, v in rates.items()}
    first = next(iter(checkouts))
    print(f"{keys} keys, {rounds} rounds (medians, rec/s):")
    for label in checkouts:
        plain, history = medians[label, "plain"], medians[label, "history"]
        print(f"  {label}: plain {plain:,.0f}, history {history:,.0f} "
              f"({history / plain:.0%} of plain); against {first}: plain "
              f"{plain / medians[first, 'plain']:.3f}, "
              f"history {history / medians[first, 'history']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
