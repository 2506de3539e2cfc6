"""A local cluster secured like a company's, for tests: by default three KRaft nodes,
replication factor 3, min ISR 2, every client over SASL_SSL with SCRAM-SHA-512.

    with secured_cluster(tmp_path / "cluster") as cluster:
        settings = cluster.client_config("app")       # librdkafka's names, or "admin"
        AdminClient({"bootstrap.servers": cluster.bootstrap, **settings})
        cluster.write_client_properties(tmp_path / "client.properties")  # --kafka-config-file
        cluster.untrusted_client_config()             # material the cluster refuses
        cluster.stop_node(cluster.leader_of(topic, 0), signal.SIGKILL); cluster.start_node(n)

A fresh 3-node start takes 11-12 s on two quiet cores (16-21 s on busy ones; one node 5-8 s)
and a stop about 6 s: share one cluster per module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from globalstore.localkafka import ANY_PORT, LocalKafka, Security

START_TIMEOUT_S = 180.0  # generous: a cold first run resolves the jars, CI machines are slow


@contextlib.contextmanager
def secured_cluster(
    data_dir: Path, nodes: int = 3, security: Security | str = Security.SASL_SSL
) -> Iterator[LocalKafka]:
    """A fresh cluster in `data_dir` on free ports (a port taken before a node binds it is
    retried on others by LocalKafka itself), stopped when the block ends."""
    cluster = LocalKafka(
        port=ANY_PORT, data_dir=data_dir, nodes=nodes, security=security, heap="512m"
    )
    cluster.start(fresh=True, timeout=START_TIMEOUT_S)
    try:
        yield cluster
    finally:
        cluster.stop()
