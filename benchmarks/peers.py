"""The cold-restore peers of bench_store.py, each restoring the same topic in a fresh process.

- ktables (PyPI, aiokafka into an in-memory dict): run here with `python peers.py ktables
  BOOTSTRAP TOPIC`; values are kept as bytes (no decoding), its cheapest configuration.
- Kafka Streams `globalTable` (Java, RocksDB): the Maven project in streams-peer/, built once
  per benchmark run.

Each prints one JSON line: seconds from start to caught up, records restored, peak RSS in MB.
"""

from __future__ import annotations

import asyncio
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

STREAMS_PEER = Path(__file__).resolve().parent / "streams-peer"


@dataclass(frozen=True)
class PeerRun:
    rate: float  # records per second, start to caught up
    rss_mb: float  # peak resident set of the peer's process


def peak_rss_mb() -> float:
    """VmHWM, the peak resident set of this process image. Not ru_maxrss: Linux folds the
    parent's high-water mark into a child's ru_maxrss across fork + exec."""
    found = re.search(r"VmHWM:\s*(\d+) kB", Path("/proc/self/status").read_text())
    if found is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return int(found.group(1)) / 1024


async def _ktables_restore(bootstrap: str, topic: str) -> dict[str, float]:
    from ktables import KafkaTable  # noqa: PLC0415 - the peer's process only

    table: KafkaTable[bytes] = KafkaTable(
        connection=bootstrap,
        topic=topic,
        value_decoder=bytes,
        ensure_topic=False,
        catchup_timeout=900,
    )
    began = time.perf_counter()
    await table.start()
    seconds = time.perf_counter() - began
    records = table.stats.records_applied + table.stats.tombstones_applied
    await table.stop()
    return {"seconds": seconds, "records": records, "rss_mb": peak_rss_mb()}


def _run(command: list[str], expected: int) -> PeerRun:
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["records"] != expected:
        raise RuntimeError(f"{command[0]} restored {result['records']}, expected {expected}")
    return PeerRun(result["records"] / result["seconds"], result["rss_mb"])


def ktables(bootstrap: str, topic: str, expected: int) -> PeerRun:
    return _run([sys.executable, __file__, "ktables", bootstrap, topic], expected)


def build_streams_peer(main_class: str = "globalstore.bench.GlobalTableRestore") -> list[str]:
    """mvn package; the java command line that runs the peer's `main_class` (its classpath
    included): the cold restore, or GlobalTableFollow for bench_faults_peer.py."""
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-Dstyle.color=never",
            "package",
            "dependency:build-classpath",
            "-Dmdep.outputFile=target/classpath.txt",
        ],
        cwd=STREAMS_PEER,
        check=True,
    )
    classpath = (STREAMS_PEER / "target" / "classpath.txt").read_text().strip()
    jar = STREAMS_PEER / "target" / "streams-peer-1.jar"
    return ["java", "-cp", f"{jar}:{classpath}", main_class]


def kafka_streams(java: list[str], bootstrap: str, topic: str, expected: int) -> PeerRun:
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as state:
        return _run([*java, bootstrap, topic, state], expected)


if __name__ == "__main__":
    if sys.argv[1:2] != ["ktables"] or len(sys.argv) != 4:
        sys.exit("usage: peers.py ktables BOOTSTRAP TOPIC")
    print(json.dumps(asyncio.run(_ktables_restore(sys.argv[2], sys.argv[3]))))
