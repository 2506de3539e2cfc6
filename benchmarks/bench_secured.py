"""What TLS and SASL/SCRAM cost a cold restore: the same topic on the same broker, read over
a PLAINTEXT listener and over a SASL_SSL one (SCRAM-SHA-512), in one run.

    python benchmarks/bench_secured.py                     # 1M keys, 3 rounds
    python benchmarks/bench_secured.py --keys 200000 --write-docs

One local broker (globalstore.localkafka, security "sasl_ssl") gets a second client
listener, PLAINTEXT, so both paths read the same log segments from the same JVM. Each round
runs four contestants in turn (the two listeners' order alternating), so noise from
neighbours hits all alike: the plain consumer ceiling and the store's cold restore, each
over both listeners. It prints medians and the median of each round's SASL_SSL / PLAINTEXT
ratio; --write-docs replaces the "## Store over SASL_SSL" section of
benchmarks/results/latest.md (nothing else there).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from bench_store import (
    Row,
    ceiling,
    cold_restore,
    create_topic,
    fill_topic,
    log,
    machine,
    table,
    write_docs,
)

from globalstore.follow.topic import end_offsets
from globalstore.localkafka import LocalKafka, Security, free_port

HEADING = "## Store over SASL_SSL"
TARGET = 0.8  # the SASL_SSL restore at >= 80 % of the plaintext one
CONTESTANTS = ("ceiling", "globalstore cold restore")
LISTENERS = ("PLAINTEXT", "SASL_SSL")


def plaintext_listener(secured: LocalKafka, port: int) -> dict[str, str]:
    """Broker settings that add a PLAINTEXT client listener on `port` beside the secured
    one of a single-node cluster."""
    secured_at = f"SASL_SSL://127.0.0.1:{secured.port}"
    return {
        "listeners": f"{secured_at},CONTROLLER://127.0.0.1:{secured.controller_port},"
        f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"{secured_at},PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT,"
        "PLAINTEXT:PLAINTEXT",
    }


def started_broker(workdir: Path) -> tuple[LocalKafka, str]:
    """The broker with both listeners, started, and its PLAINTEXT bootstrap."""
    port = free_port()
    broker = LocalKafka(port=port, data_dir=workdir / "kafka", security=Security.SASL_SSL)
    plain_port = free_port()
    while plain_port in (port, broker.controller_port):  # both are free until the JVM binds
        plain_port = free_port()
    broker.extra_config.update(plaintext_listener(broker, plain_port))
    broker.start(fresh=True, timeout=180)
    return broker, f"127.0.0.1:{plain_port}"


Rates = dict[tuple[str, str], list[float]]  # (contestant, listener): records/s per round


def rounds(broker: LocalKafka, plain: str, topic: str, total: int, n: int, workdir: Path) -> Rates:
    """Each contestant over each listener once per round, in turn."""
    paths = {"PLAINTEXT": (plain, {}), "SASL_SSL": (broker.bootstrap, broker.client_config())}
    rates: Rates = {}
    for r in range(n):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))  # neither always first
        for listener in order:
            bootstrap, client = paths[listener]
            rate = ceiling(bootstrap, topic, total, client=client)
            rates.setdefault(("ceiling", listener), []).append(rate)
            restored, records = cold_restore(bootstrap, topic, workdir / "s", client=client)
            if records != total:
                raise RuntimeError(f"restored {records} records over {listener}, not {total}")
            rates.setdefault(("globalstore cold restore", listener), []).append(restored)
        latest = {f"{c} {li}": f"{v[-1]:,.0f}" for (c, li), v in rates.items()}
        log(f"round {r + 1}: {latest}")
    return rates


def rows(rates: Rates) -> list[Row]:
    out = []
    for contestant in CONTESTANTS:
        medians = {li: statistics.median(rates[(contestant, li)]) for li in LISTENERS}
        for listener in LISTENERS:
            raw = rates[(contestant, listener)]
            out.append(Row(f"{contestant}, {listener}", medians[listener], "rec/s", raw=raw))
        # Each round's two runs are neighbours in time: their ratio cancels the drift of a
        # shared machine's load, which the ratio of the two medians would not.
        pairs = zip(rates[(contestant, "SASL_SSL")], rates[(contestant, "PLAINTEXT")], strict=True)
        ratios = [100 * secured / plain for secured, plain in pairs]
        ratio = statistics.median(ratios)
        target, ok = ("≥ 80 %", ratio >= 100 * TARGET) if contestant != "ceiling" else ("", None)
        name = f"{contestant}: SASL_SSL / PLAINTEXT, median of the rounds' ratios"
        out.append(Row(name, ratio, "%", target, ok, ratios))
    return out


def section(result: list[Row], about: str, setup: str) -> str:
    return "\n".join(
        [
            HEADING,
            "",
            f"Machine: {about}.",
            "",
            f"Command: `python benchmarks/bench_secured.py {' '.join(sys.argv[1:])}`. {setup}",
            "",
            table(result),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--write-docs", action="store_true", help="update benchmarks/results/latest.md"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-secured-") as tmp:
        workdir = Path(tmp)
        log("starting a local Kafka broker with a SASL_SSL and a PLAINTEXT listener")
        broker, plain = started_broker(workdir)
        try:
            topic = f"bench-secured-{uuid.uuid4().hex[:8]}"
            create_topic(plain, topic)
            seconds = fill_topic(plain, topic, args.keys, "small batches")
            total = sum(end_offsets(plain, topic).values())
            setup = (
                f"{total:,} records (~200-byte JSON values, small batches, lz4) produced in "
                f"{seconds:.1f}s over PLAINTEXT; medians of {args.rounds} alternating rounds."
            )
            log(setup)
            result = rows(rounds(broker, plain, topic, total, args.rounds, workdir))
            about = machine(broker.status().version)
        finally:
            broker.stop()
    print(table(result))
    if args.write_docs:
        write_docs(section(result, about, setup), HEADING)
        log(f"wrote the '{HEADING}' section of benchmarks/results/latest.md")


if __name__ == "__main__":
    main()
