"""Serving benchmark: GET by key (req/s, p99), NDJSON export (items/s), and a new instance
booting from a peer's snapshot against a full restore from Kafka, in the same run.

    python benchmarks/bench_serve.py                   # 1M keys on a fresh local broker
    python benchmarks/bench_serve.py --keys 100000     # a quick check
    python benchmarks/bench_serve.py --bootstrap-servers 127.0.0.1:9092 --write-docs

The server is `globalstore serve` in its own process; the load generator (benchmarks/loadgen.py)
runs in this one, on loopback. Prints a table with PASS/MISS per target; --write-docs replaces
the "## Serving" section of benchmarks/results/latest.md (nothing else there).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench_store import (
    Row,
    create_topic,
    fill_topic,
    key_of,
    log,
    machine,
    table,
)
from loadgen import run_load

from globalstore import GlobalStore
from globalstore.localkafka import LocalKafka, free_port

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "benchmarks" / "results" / "latest.md"
HEADING = "## Serving"


def serve(
    bootstrap: str,
    topic: str,
    path: Path,
    port: int,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`globalstore serve` (with more `options`) in its own process, once /readyz says ready.
    `env`: the process's environment (default: this one's)."""
    command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", topic]
    command += ["--bootstrap-servers", bootstrap, "--path", str(path), "--port", str(port)]
    command += ["--timeout", "600", *options]
    proc = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"globalstore serve exited with {proc.returncode}")
        try:
            if _get_status(port, "/readyz") == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("globalstore serve was not ready within 900s")


def _get_status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def export_rate(port: int, expected: int) -> float:
    """Items/s of a full /v1/export, reading the stream in 1 MiB chunks and counting lines."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    began = time.perf_counter()
    conn.request("GET", "/v1/export")
    response = conn.getresponse()
    lines = 0
    while chunk := response.read(1 << 20):
        lines += chunk.count(b"\n")
    seconds = time.perf_counter() - began
    conn.close()
    if lines != expected:
        raise RuntimeError(f"export gave {lines} lines, expected {expected}")
    return lines / seconds


def boot_seconds(
    bootstrap: str, topic: str, path: Path, source: str | None, timeout: float = 900
) -> float:
    """Wall seconds from an empty directory to a ready store (from `source`, or from Kafka)."""
    shutil.rmtree(path, ignore_errors=True)
    began = time.perf_counter()
    store = GlobalStore(topic, bootstrap, path, bootstrap_from=source).start(timeout=timeout)
    seconds = time.perf_counter() - began
    store.close()
    return seconds


def snapshot_stream(port: int) -> tuple[float, float, int]:
    """(seconds to the first byte = checkpoint time, seconds in all, bytes) of /v1/snapshot."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    began = time.perf_counter()
    conn.request("GET", "/v1/snapshot")
    response = conn.getresponse()
    first = time.perf_counter() - began
    size = 0
    while chunk := response.read(1 << 20):
        size += len(chunk)
    conn.close()
    return first, time.perf_counter() - began, size


def run(args: argparse.Namespace, bootstrap: str, kafka_version: str, workdir: Path) -> None:
    topic = f"bench-serve-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    log(f"producing {args.keys:,} keys into {topic}")
    produced = fill_topic(bootstrap, topic, args.keys, "small batches")
    load_before = os.getloadavg()[0]
    port = free_port()
    log("starting globalstore serve (cold restore)")
    server = serve(bootstrap, topic, workdir / "a", port)
    rows: list[Row] = []
    notes: list[str] = []
    try:
        rng = random.Random(7)
        paths = [f"/v1/keys/{key_of(rng.randrange(args.keys))}" for _ in range(20_000)]
        run_load("127.0.0.1", port, paths, args.connections, 2.0)  # warm-up
        results = []
        for r in range(args.rounds):
            result = run_load("127.0.0.1", port, paths, args.connections, args.seconds)
            log(f"GET by key round {r + 1}: {result.summary()}")
            results.append(result)
        rates = [x.rate for x in results]
        p99s = [x.percentile(0.99) * 1000 for x in results]
        rows.append(
            Row(
                "GET by key",
                statistics.median(rates),
                "req/s",
                "≥ 5,000",
                statistics.median(rates) >= 5000,
                rates,
            )
        )
        rows.append(
            Row(
                "GET by key p99",
                statistics.median(p99s),
                "ms",
                "≤ 10 ms",
                statistics.median(p99s) <= 10,
                p99s,
            )
        )
        errors = sum(x.errors for x in results)
        exports = []
        for r in range(args.rounds):
            exports.append(export_rate(port, args.keys))
            log(f"export round {r + 1}: {exports[-1]:,.0f} items/s")
        rows.append(
            Row(
                f"export of {args.keys:,} keys",
                statistics.median(exports),
                "items/s",
                "≥ 200,000",
                statistics.median(exports) >= 200_000,
                exports,
            )
        )
        first, total, size = snapshot_stream(port)
        log(f"snapshot: first byte {first:.3f}s, {size / 1e6:,.0f} MB in {total:.2f}s")
        rows.append(Row("snapshot: checkpoint (to first byte)", first, "s"))
        rows.append(Row(f"snapshot: stream of {size / 1e6:,.0f} MB", total, "s"))
        url = f"http://127.0.0.1:{port}/v1/snapshot"
        full, boot = [], []
        for r in range(args.rounds):
            full.append(boot_seconds(bootstrap, topic, workdir / "b", None))
            boot.append(boot_seconds(bootstrap, topic, workdir / "b", url))
            log(f"round {r + 1}: full restore {full[-1]:.2f}s, snapshot boot {boot[-1]:.2f}s")
        rows.append(
            Row("new instance: full restore from Kafka", statistics.median(full), "s", raw=full)
        )
        rows.append(
            Row("new instance: boot from peer snapshot", statistics.median(boot), "s", raw=boot)
        )
        speedup = statistics.median(full) / statistics.median(boot)
        rows.append(Row("snapshot boot speed-up", speedup, "x", "≥ 5x", speedup >= 5))
    finally:
        server.terminate()
        server.wait(60)
    load_after = os.getloadavg()[0]
    print(table(rows))
    notes += [
        f"Medians of {args.rounds} rounds. Setup: produced {args.keys:,} keys (~200-byte JSON "
        f"values, 6 partitions) in {produced:.1f}s. Load average (1 min) {load_before:.1f} "
        f"before and {load_after:.1f} after, on {os.cpu_count()} CPUs.",
        f"GET by key: {args.connections} keep-alive connections, one request in flight each, "
        f"{args.seconds:g}s per round, random existing keys; {errors} responses were 5xx. "
        "Server and load generator share the same CPUs.",
        "Export: the whole store as NDJSON over one connection, read in 1 MiB chunks.",
        "New instance: an in-process GlobalStore on an empty directory, start() to ready; "
        "the snapshot boot downloads GET /v1/snapshot from the serving instance, installs "
        "it, and catches up from its offsets. Full restore and snapshot boot alternate.",
    ]
    if args.write_docs:
        write_section(rows, machine(kafka_version), notes)


def write_section(rows: list[Row], about: str, notes: list[str]) -> None:
    """Replace only the "## Serving" section (up to the next "## " heading) of the docs file."""
    command = f"python benchmarks/bench_serve.py {' '.join(sys.argv[1:])}".strip()
    section = "\n".join(
        [
            HEADING,
            "",
            f"Machine: {about}.",
            "",
            f"Command: `{command}`.",
            "",
            table(rows),
            "",
            *[f"- {n}" for n in notes],
        ]
    )
    text = DOCS.read_text()
    pattern = re.compile(rf"^{HEADING}\n.*?(?=^## |\Z)", re.S | re.M)
    old = pattern.search(text)
    if old:
        # Hand-written subsections ("### ...": the stack choice, findings) are kept.
        kept = re.search(r"^### .*", old.group(0), re.S | re.M)
        if kept:
            section += "\n\n" + kept.group(0).rstrip()
        text = pattern.sub(lambda _: section + "\n\n", text, count=1)
    else:
        text = text.rstrip() + "\n\n" + section
    DOCS.write_text(text.rstrip() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--bootstrap-servers", help="Use this broker instead of a fresh one.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="per GET round")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp,
        contextlib.ExitStack() as on_exit,
    ):
        bootstrap, version = args.bootstrap_servers, f"at {args.bootstrap_servers} (given)"
        if not bootstrap:
            log("starting a local Kafka broker")
            local = LocalKafka(port=free_port(), data_dir=Path(tmp, "kafka"), heap="1g")
            broker = on_exit.enter_context(local)
            bootstrap, version = broker.bootstrap, broker.status().version
        run(args, bootstrap, version, Path(tmp))


if __name__ == "__main__":
    main()
