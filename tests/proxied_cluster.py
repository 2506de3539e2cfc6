"""A local Kafka cluster (3 nodes unless asked) whose clients go through Toxiproxy: each
node has a second listener whose clients are told to reach it through a proxy of its own,
so every request a client sends to a node passes that node's proxy, and a toxic on it cuts
or slows them.
The nodes replicate among themselves on their first listener, and the tests' producers and
reference reads use it too (`direct`): a fault on the proxies is a fault between the store
and the brokers only (or between the Spark job and the brokers). Loopback addresses only.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from globalstore.localkafka import LocalKafka, free_port
from tests.conftest import wait_until_served
from tests.toxiproxy import Toxiproxy, running_toxiproxy

NODES = 3


@dataclass
class ProxiedCluster:
    kafka: LocalKafka
    toxiproxy: Toxiproxy
    proxies: dict[int, str]  # node id -> the address of its proxy

    @property
    def bootstrap(self) -> str:
        """What a client behind the proxies bootstraps from."""
        return ",".join(self.proxies.values())

    @property
    def direct(self) -> str:
        """The nodes' own addresses: no proxy on the way."""
        return self.kafka.bootstrap

    def cut(self, nodes: Iterable[int] | None = None) -> None:
        """A partition between the proxied clients and `nodes` (all): connections hang."""
        for node in self.proxies if nodes is None else nodes:
            self.toxiproxy.cut(_name(node))

    def heal(self) -> None:
        for node in self.proxies:
            self.toxiproxy.heal(_name(node))

    def slow(self, latency_ms: int, kilobytes_per_s: int) -> None:
        """Every proxy adds `latency_ms` each way and passes at most `kilobytes_per_s`
        towards the clients (the direction of a restore's bytes)."""
        for node in self.proxies:
            for stream in ("upstream", "downstream"):
                self.toxiproxy.toxic(_name(node), f"latency-{stream}", "latency", stream,
                                     latency=latency_ms)  # fmt: skip
            self.toxiproxy.toxic(_name(node), "bandwidth", "bandwidth", "downstream",
                                 rate=kilobytes_per_s)  # fmt: skip

    def create_topic(self, partitions: int, compact: bool = True) -> str:
        """A topic (compacted unless asked) replicated on every node, served by leaders."""
        name = f"faults-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.direct})
        policy = "compact" if compact else "delete"
        topic = NewTopic(name, partitions, config={"cleanup.policy": policy})
        admin.create_topics([topic])[name].result(timeout=60)
        wait_until_served(admin, name, partitions)
        return name


def _name(node: int) -> str:
    return f"node-{node}"


@contextlib.contextmanager
def proxied_cluster(scratch: Path, nodes: int = NODES) -> Iterator[ProxiedCluster]:
    """Toxiproxy, then the cluster of `nodes` nodes behind it; both stopped at the end."""
    with running_toxiproxy(scratch / "toxiproxy.log") as toxiproxy:
        # One block of ports, none picked by the system on the way: the nodes' client,
        # controller and proxied listeners, then the proxies.
        port = free_port(4 * nodes)
        listeners = {node: port + 2 * nodes + node - 1 for node in range(1, nodes + 1)}
        proxies = {
            node: toxiproxy.proxy(_name(node), f"127.0.0.1:{listener}", listener + nodes)
            for node, listener in listeners.items()
        }
        kafka = LocalKafka(
            port=port,
            controller_port=port + nodes,
            data_dir=scratch / "kafka",
            nodes=nodes,
            proxied={node: (listeners[node], proxies[node]) for node in proxies},
        )
        kafka.start(timeout=180)
        try:
            yield ProxiedCluster(kafka, toxiproxy, proxies)
        finally:
            kafka.stop()
