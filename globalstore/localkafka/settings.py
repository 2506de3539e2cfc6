"""What each node of the dev cluster is told, rendered as text: server.properties, the log4j2
config, the nodes' addresses (and whether their ports are free) and a cluster id. Nothing
here starts or writes anything."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from globalstore.localkafka.errors import PortInUseError
from globalstore.localkafka.ports import HOST, port_is_free

__all__ = [
    "PROXIED",
    "NodeAddress",
    "check_ports_free",
    "cluster_id",
    "node_addresses",
    "node_settings",
    "render_log4j2",
    "render_properties",
    "render_server_properties",
    "server_settings",
]

PROXIED = "PROXIED"  # the name of a node's listener behind a proxy, when it has one


@dataclass(frozen=True)
class NodeAddress:
    """Where one combined broker+controller node listens."""

    node_id: int
    client_port: int
    controller_port: int

    @property
    def client(self) -> str:
        """host:port where clients reach the node."""
        return f"{HOST}:{self.client_port}"


def node_addresses(port: int, controller_port: int, nodes: int) -> list[NodeAddress]:
    """Node i (1..N) takes client port `port + i - 1` and controller port
    `controller_port + i - 1`: one node keeps its two ports, a cluster two blocks of N."""
    return [NodeAddress(i, port + i - 1, controller_port + i - 1) for i in range(1, nodes + 1)]


def node_settings(
    node: NodeAddress,
    quorum: Sequence[NodeAddress],
    log_dir: Path | str,
    listener: str = "PLAINTEXT",
    security: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    proxied: tuple[int, str] | None = None,
) -> dict[str, str]:
    """The settings of `node`, one of the combined broker+controller nodes in `quorum`.

    `listener` names the client listener and its security protocol (PLAINTEXT, SASL_SSL,
    SSL), which brokers also use among themselves; `security` adds its TLS and SASL
    settings. The controller listener stays PLAINTEXT on loopback. `proxied` (port,
    host:port) adds a plaintext listener PROXIED on that loopback port whose clients are
    told to reach the node at host:port, a proxy in front of it (fault injection); the
    brokers keep talking among themselves on the client listener."""
    # Replication factor min(3, N) and min ISR min(2, N): on three nodes a write acked by
    # all in-sync replicas survives one node down, and one node still works alone.
    replicas, min_isr = str(min(3, len(quorum))), str(min(2, len(quorum)))
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(
            f"{voter.node_id}@{HOST}:{voter.controller_port}" for voter in quorum
        ),
        "listeners": f"{listener}://{node.client},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"{listener}://{node.client}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": listener,
        "listener.security.protocol.map": f"{listener}:{listener},CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        # Small partition counts keep the first group/transaction use fast.
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "delete.topic.enable": "true",
    }
    if proxied is not None:
        if listener != "PLAINTEXT":
            raise ValueError(f"a {PROXIED} listener is plaintext: the cluster's is {listener}")
        port, advertised = proxied
        settings["listeners"] += f",{PROXIED}://{HOST}:{port}"
        settings["advertised.listeners"] += f",{PROXIED}://{advertised}"
        settings["listener.security.protocol.map"] += f",{PROXIED}:PLAINTEXT"
    settings.update(security or {})
    settings.update(extra or {})
    return settings


def check_ports_free(addresses: Iterable[NodeAddress]) -> None:
    """Raise PortInUseError naming the first port of `addresses` that is taken."""
    for address in addresses:
        roles = {address.client_port: "client", address.controller_port: "controller"}
        for port, role in roles.items():
            if not port_is_free(port):
                raise PortInUseError(
                    f"port {port} ({role} listener) is already in use on {HOST}: stop what "
                    "holds it, or pick another port (`globalstore kafka start --port N`)"
                )


def server_settings(
    port: int, controller_port: int, log_dir: Path | str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The settings of a combined broker+controller node that is alone in its cluster."""
    alone = NodeAddress(1, port, controller_port)
    return node_settings(alone, [alone], log_dir, extra=extra)


def render_properties(settings: Mapping[str, str]) -> str:
    """`settings` as the text of a Java properties file."""
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def render_server_properties(
    port: int, controller_port: int, log_dir: Path, extra: Mapping[str, str] | None = None
) -> str:
    """server.properties for a combined broker+controller node that is alone in its cluster."""
    return render_properties(server_settings(port, controller_port, log_dir, extra))


def render_log4j2(log_file: Path) -> str:
    """A log4j2 config that writes the broker's log to one rolling file."""
    return (
        "Configuration:\n"
        "  Appenders:\n"
        "    RollingFile:\n"
        "      name: file\n"
        f"      fileName: {log_file}\n"
        f"      filePattern: {log_file}.%i\n"
        "      PatternLayout: {pattern: '[%d] %p %m (%c)%n'}\n"
        "      SizeBasedTriggeringPolicy: {size: 20MB}\n"
        "      DefaultRolloverStrategy: {max: 3}\n"
        "  Loggers:\n"
        "    Root: {level: INFO, AppenderRef: [{ref: file}]}\n"
    )


def cluster_id() -> str:
    """16 random bytes in URL-safe base64 without padding, as Kafka's own ids. One in 64 of
    those begins with '-', which the storage tool reads as an option: draw again, as Kafka's
    Uuid.randomUuid() does."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate
