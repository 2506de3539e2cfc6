"""What a data directory records about its cluster, for any later process to read.

broker.json   the running JVMs: their pids by node id, the bootstrap, the version and
              the shape. Written at each launch, removed by stop().
cluster.json  the cluster's shape (node count, security), kept across stops: a data
              directory formatted for three SASL_SSL nodes cannot restart as one
              plaintext node. A single plaintext node, the default, writes none, so
              its directory stays as it always was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from globalstore.localkafka.errors import LocalKafkaError
from globalstore.localkafka.security import Security, parse_security

__all__ = [
    "SHAPE_FILE",
    "STATE_FILE",
    "BrokerStatus",
    "ClusterShape",
    "StateFile",
    "check_shape",
    "record_shape",
    "recorded_shape",
]

STATE_FILE = "broker.json"
SHAPE_FILE = "cluster.json"


@dataclass(frozen=True)
class ClusterShape:
    """How many nodes, secured how."""

    nodes: int = 1
    security: Security = Security.PLAINTEXT

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"nodes must be a whole number of at least 1, not {self.nodes!r}")

    def describe(self) -> str:
        """The shape for messages, as "3-node sasl_ssl"."""
        return f"{self.nodes}-node {self.security.value}"

    def as_dict(self) -> dict[str, object]:
        """The shape as broker.json records it."""
        return {"nodes": self.nodes, "security": self.security.value}


def _read_json(path: Path) -> dict[str, object]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _shape_of(recorded: Mapping[str, object]) -> ClusterShape:
    nodes, security = recorded.get("nodes", 1), recorded.get("security", "plaintext")
    return ClusterShape(nodes if isinstance(nodes, int) else 1, parse_security(str(security)))


def recorded_shape(data_dir: Path) -> ClusterShape | None:
    """The shape `data_dir` was formatted for; None when it was never formatted."""
    recorded = _read_json(data_dir / SHAPE_FILE)
    if recorded:
        return _shape_of(recorded)
    # Before cluster.json existed, and still for the default: one plaintext node.
    return ClusterShape() if (data_dir / "kraft" / "meta.properties").exists() else None


def check_shape(data_dir: Path, shape: ClusterShape) -> None:
    """Raise LocalKafkaError when `data_dir` was formatted for another shape."""
    recorded = recorded_shape(data_dir)
    if recorded is not None and recorded != shape:
        raise LocalKafkaError(
            f"{data_dir} holds a {recorded.describe()} cluster, not a {shape.describe()} one: "
            f"start it as it is (--nodes {recorded.nodes} --security "
            f"{recorded.security.value}) or wipe it first (--fresh)"
        )


def record_shape(data_dir: Path, shape: ClusterShape) -> None:
    """Remember a cluster's shape in its data directory (nothing for the default shape)."""
    if shape != ClusterShape():
        (data_dir / SHAPE_FILE).write_text(json.dumps(shape.as_dict()) + "\n")


@dataclass(frozen=True)
class BrokerStatus:
    """What `globalstore kafka status` reports of the local broker."""

    running: bool
    pid: int | None  # the first running node's
    bootstrap: str
    data_dir: Path
    version: str
    node_pids: Mapping[int, int] = field(default_factory=dict)  # the running nodes'
    shape: ClusterShape = field(default_factory=ClusterShape)

    def describe(self) -> str:
        """The report `globalstore kafka status` prints, one field a line."""
        state = f"running (pid {self.pid})" if self.running else "stopped"
        if self.running and self.shape.nodes > 1:
            pids = ", ".join(f"node {node} pid {pid}" for node, pid in self.node_pids.items())
            state = f"running ({len(self.node_pids)} of {self.shape.nodes} nodes: {pids})"
        shape = "" if self.shape == ClusterShape() else f"\ncluster:   {self.shape.describe()}"
        return (
            f"state:     {state}\nbootstrap: {self.bootstrap}\n"
            f"data dir:  {self.data_dir}\nversion:   {self.version}{shape}"
        )


class StateFile:
    """broker.json: the record of the running JVMs."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATE_FILE

    def read(self) -> dict[str, object]:
        """What broker.json holds; {} if it is missing or does not parse."""
        return _read_json(self.path)

    def pids(self) -> dict[int, int]:
        """The recorded pid of each node, alive or not."""
        recorded = self.read()
        pids = recorded.get("pids")
        if isinstance(pids, dict):
            return {int(node): pid for node, pid in pids.items() if isinstance(pid, int)}
        pid = recorded.get("pid")  # a file written before clusters: one node
        return {1: pid} if isinstance(pid, int) else {}

    def shape(self) -> ClusterShape | None:
        """The recorded cluster shape; None if nothing is recorded."""
        recorded = self.read()
        return _shape_of(recorded) if recorded else None

    def write(
        self, pids: Mapping[int, int], bootstrap: str, version: str, shape: ClusterShape
    ) -> None:
        """Record the running nodes' pids, the bootstrap, the Kafka version and the shape."""
        state = {
            "pid": pids[min(pids)],  # the first node's, where a one-node reader looks
            "pids": {str(node): pid for node, pid in sorted(pids.items())},
            "bootstrap": bootstrap,
            "version": version,
            **shape.as_dict(),
        }
        self.path.write_text(json.dumps(state))

    def remove(self) -> None:
        """Forget the cluster; nothing if no record is there."""
        self.path.unlink(missing_ok=True)
