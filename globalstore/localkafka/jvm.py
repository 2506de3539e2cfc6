"""The node JVMs as processes: launch one, run the storage tool, tell whether a pid is still
one of them, signal them and wait until they are gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "QUICK_START",
    "format_storage",
    "is_our_broker",
    "launch_node",
    "send_signal",
    "terminate",
    "wait_for_exit",
]

_KILL_WAIT_S = 10.0
# The storage tool runs for a second or two: the C2 compiler only costs it CPU, which the
# other nodes' tools need at the same moment (3 formats on 2 busy cores: 11 s -> 5 s).
_SHORT_LIVED = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# For the nodes of a cluster: three JVMs starting at once on a small machine spend much of
# their start compiling with C2. C1 only halved a 3-node start (37 s -> 20 s on 2 cores under
# load) with no measurable cost to a test's throughput (200k records of 1 kB over SASL_SSL).
QUICK_START = ("-XX:TieredStopAtLevel=1",)


def launch_node(
    java: str, classpath: str, heap: str, node_dir: Path, options: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Start the Kafka JVM of the node whose files are in `node_dir`."""
    command = [
        java, f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", *options,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={node_dir / 'log4j2.yaml'}",
        f"-Dkafka.logs.dir={node_dir / 'logs'}",
        "-cp", classpath, "kafka.Kafka", str(node_dir / "server.properties"),
    ]  # fmt: skip
    with (node_dir / "logs" / "stdout.log").open("ab") as stdout:
        # A session of its own: the broker outlives the CLI that started it and does
        # not receive the terminal's Ctrl-C.
        return subprocess.Popen(
            command, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True
        )


def format_storage(
    java: str, classpath: str, cluster_id: str, configs: Sequence[Path], extra: Sequence[str]
) -> list[subprocess.CompletedProcess[str]]:
    """Run the storage tool's `format` for each config, all at once (a JVM start each)."""
    runs = [
        subprocess.Popen(
            _format_command(java, classpath, cluster_id, config, extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for config in configs
    ]
    results = []
    for run in runs:
        stdout, stderr = run.communicate()
        results.append(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr))
    return results


def _format_command(
    java: str, classpath: str, cluster_id: str, config: Path, extra: Sequence[str]
) -> list[str]:
    return [
        java, *_SHORT_LIVED, "-cp", classpath, "kafka.tools.StorageTool", "format",
        "--cluster-id", cluster_id, "--config", str(config), *extra,
    ]  # fmt: skip


def is_our_broker(pid: int) -> bool:
    """True when `pid` is alive and is a Kafka broker (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if b"kafka.Kafka" not in cmdline:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has already exited


def send_signal(pid: int, signum: int) -> None:
    """Send `signum` to `pid`; a process already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def wait_for_exit(pids: Iterable[int], timeout: float) -> bool:
    """Whether every one of `pids` is gone within `timeout` seconds."""
    remaining = set(pids)
    deadline = time.monotonic() + timeout
    while True:
        remaining = {pid for pid in remaining if is_our_broker(pid)}
        if not remaining or time.monotonic() >= deadline:
            return not remaining
        time.sleep(0.1)


def terminate(pids: Iterable[int], timeout: float, signum: int = signal.SIGTERM) -> None:
    """Send `signum` to every pid and wait until they are gone; SIGKILL whatever is still
    there after `timeout` seconds."""
    pids = list(pids)
    for pid in pids:
        send_signal(pid, signum)
    if not wait_for_exit(pids, timeout):
        for pid in pids:
            if is_our_broker(pid):
                send_signal(pid, signal.SIGKILL)
        wait_for_exit(pids, _KILL_WAIT_S)
