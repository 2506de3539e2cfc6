"""Start, stop and inspect a local Apache Kafka cluster (KRaft) of background JVMs.

One launcher shared by the CLI (`globalstore kafka ...`), the tests, the benchmarks and the
demo. By default it is one combined broker+controller node with a PLAINTEXT listener;
`nodes=3` makes three such nodes (one JVM each, a controller quorum of all three) and
`security="sasl_ssl"` or `"mtls"` secures their client listeners (security.py). The data
directory holds the KRaft metadata, the topics, the logs (one node-N/ directory per node of
a cluster) and a small `broker.json` describing the running processes, so `status` and
`stop` work from any later process.

    with LocalKafka(port=19092, data_dir=tmp) as kafka:
        produce_to(kafka.bootstrap)
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from globalstore.localkafka import jvm
from globalstore.localkafka.errors import BrokerExitedError, LocalKafkaError, PortInUseError
from globalstore.localkafka.jars import cache_root, resolve_kafka_jars
from globalstore.localkafka.java import check_java
from globalstore.localkafka.metadata import admin_client, answers, partition_leader
from globalstore.localkafka.paths import NodeFiles, default_data_dir, log_since, log_sizes
from globalstore.localkafka.ports import free_port, lost_port_race, port_is_free
from globalstore.localkafka.security import (
    Security,
    SecurityFiles,
    broker_security,
    client_settings,
    format_arguments,
    parse_security,
    untrusted_client_settings,
    write_private,
    write_properties,
)
from globalstore.localkafka.settings import (
    NodeAddress,
    check_ports_free,
    cluster_id,
    node_addresses,
    node_settings,
    render_log4j2,
    render_properties,
    render_server_properties,
    server_settings,
)
from globalstore.localkafka.state import (
    BrokerStatus,
    ClusterShape,
    StateFile,
    check_shape,
    record_shape,
)

__all__ = [  # the names other modules and the tests have always imported from here
    "ANY_PORT", "DEFAULT_HEAP", "DEFAULT_KAFKA_VERSION", "DEFAULT_NODE_HEAP", "DEFAULT_PORT",
    "BrokerStatus", "LocalKafka", "PortInUseError", "cluster_id", "default_data_dir",
    "free_port", "lost_port_race", "port_is_free", "render_server_properties",
    "server_settings",
]  # fmt: skip

DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_PORT = 9092
DEFAULT_HEAP = "1g"
DEFAULT_NODE_HEAP = "512m"  # per node of a cluster: three JVMs share the machine
ANY_PORT = 0  # LocalKafka(port=ANY_PORT): start() picks free ports and retries a lost race
_PORT_ATTEMPTS = 5


class LocalKafka:
    """A KRaft cluster of combined broker+controller nodes in a data directory that survives
    restarts: one plaintext node unless told otherwise."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        data_dir: Path | str | None = None,
        version: str = DEFAULT_KAFKA_VERSION,
        heap: str | None = None,
        controller_port: int | None = None,
        extra_config: Mapping[str, str] | None = None,
        cache_dir: Path | None = None,
        nodes: int = 1,
        security: Security | str = Security.PLAINTEXT,
        jvm_options: Sequence[str] | None = None,
        proxied: Mapping[int, tuple[int, str]] | None = None,  # settings.py: node_settings
    ) -> None:
        # An unknown security or a node count below 1 is a ValueError naming the choices.
        self.shape = ClusterShape(nodes, parse_security(security))
        # port=ANY_PORT: the first start() picks the ports (clients' and controllers') and
        # tries again with new ones if another process binds them first; .port then tells,
        # and later starts reuse it.
        self._any_port = port == ANY_PORT
        self.port = port
        self.controller_port = controller_port or port + nodes
        if not self._any_port and self.controller_port in range(port - nodes + 1, port + nodes):
            raise ValueError(f"controller ports from {self.controller_port} overlap client ports")
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.version = version
        self.heap = heap or (DEFAULT_HEAP if nodes == 1 else DEFAULT_NODE_HEAP)
        # Extra JVM options of every node; by default a cluster's nodes start C1-only (jvm.py).
        default_options = jvm.QUICK_START if nodes > 1 else ()
        self.jvm_options = list(default_options if jvm_options is None else jvm_options)
        self.extra_config, self.proxied = dict(extra_config or {}), dict(proxied or {})
        self.cache_dir = cache_dir or cache_root()
        self.security_files = SecurityFiles(self.data_dir / "security")
        self._state = StateFile(self.data_dir)
        self._started_here = False

    @property
    def nodes(self) -> int:
        """How many nodes the cluster has."""
        return self.shape.nodes

    @property
    def security(self) -> Security:
        """How clients connect: plaintext, SASL/SCRAM over TLS, or mutual TLS."""
        return self.shape.security

    @property
    def bootstrap(self) -> str:
        """host:port of every node's client listener, comma-separated."""
        return ",".join(address.client for address in self._addresses())

    @property
    def log_file(self) -> Path:
        """The first node's server log."""
        return self.node_files(1).log_file

    def node_files(self, node_id: int) -> NodeFiles:
        """Where node `node_id` keeps its files: the data dir itself when it is alone."""
        self._check_node(node_id)
        return NodeFiles(self.data_dir if self.nodes == 1 else self.data_dir / f"node-{node_id}")

    # -- lifecycle -------------------------------------------------------------------------

    # Over the size cap (C901) on purpose: the tries over ports and nodes read best as one.
    def start(self, fresh: bool = False, timeout: float = 60.0) -> str:  # noqa: C901
        """Start the nodes unless they already run; wait until each answers; return bootstrap."""
        if not fresh:
            check_shape(self.data_dir, self.shape)
        running = self._running_pids()
        if running and not fresh:
            return self._recorded_bootstrap()
        if running:
            self.stop()
        java = check_java()
        if not self._any_port:
            self._check_ports()
        jars = resolve_kafka_jars(self.version, self.cache_dir)
        if fresh:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._prepare_security()
        deadline = time.monotonic() + timeout
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            retry = self._any_port and attempt < _PORT_ATTEMPTS
            if self._any_port:
                self._pick_ports()
                try:
                    self._check_ports()
                except PortInUseError:
                    if retry:
                        continue
                    raise
            self._write_config_files()
            self._format_storage(java, jars.classpath)
            logged = self._log_sizes()
            processes = {node: self._launch(node, java, jars.classpath) for node in self._ids()}
            self._record({node: process.pid for node, process in processes.items()})
            try:
                self._wait_until_ready(processes, max(0.0, deadline - time.monotonic()))
            except BrokerExitedError:
                self.stop()
                if retry and lost_port_race(self._log_since(logged)):
                    continue
                raise
            except BaseException:  # timeout, Ctrl-C: the JVMs run in sessions of their own
                self.stop()
                raise
            break
        self._any_port = False  # from now on the cluster is at this address, also after stop
        self._started_here = True
        return self.bootstrap

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM every node, then SIGKILL after `timeout` seconds. Returns whether any ran."""
        pids = self._running_pids()
        if pids:
            jvm.terminate(pids.values(), timeout)
        self._state.remove()
        return bool(pids)

    def status(self) -> BrokerStatus:
        """Whether the broker runs (pids by node) and what broker.json recorded of it."""
        pids = self._running_pids()
        recorded = self._state.read()
        return BrokerStatus(
            running=bool(pids),
            pid=pids[min(pids)] if pids else None,
            bootstrap=str(recorded.get("bootstrap", self.bootstrap)),
            data_dir=self.data_dir,
            version=str(recorded.get("version", self.version)),
            node_pids=pids,
            shape=self._state.shape() or self.shape,
        )

    def log_tail(self, lines: int = 40, node_id: int = 1) -> str:
        """The last `lines` lines of node `node_id`'s log."""
        return self.node_files(node_id).log_tail(lines)

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leave alone a cluster that was already running before this context began.
        if self._started_here:
            self.stop()

    # -- one node at a time (failover tests) -----------------------------------------------

    def node_pids(self) -> dict[int, int]:
        """The pid of each running node, by node id."""
        return self._running_pids()

    def stop_node(
        self, node_id: int, signal_number: int = signal.SIGTERM, timeout: float = 30.0
    ) -> None:
        """Send node `node_id` `signal_number` (SIGKILL for a crash) and wait until it is
        gone; SIGKILL after `timeout` seconds if it is still there."""
        pid = self._running_pids().get(node_id)
        if pid is None:
            raise LocalKafkaError(f"node {node_id} is not running")
        jvm.terminate([pid], timeout, signal_number)

    def start_node(self, node_id: int, timeout: float = 60.0) -> None:
        """Start node `node_id` again (if it is down) and wait until it serves metadata that
        lists it, i.e. it is back in the cluster."""
        running = self._running_pids()
        if self._check_node(node_id) in running:
            return
        java = check_java()
        jars = resolve_kafka_jars(self.version, self.cache_dir)
        process = self._launch(node_id, java, jars.classpath)
        self._record({**running, node_id: process.pid})
        try:
            self._wait_until_ready({node_id: process}, timeout)
        except BaseException:
            jvm.terminate([process.pid], 10.0)
            raise

    def leader_of(self, topic: str, partition: int) -> int:
        """The node id leading `partition` of `topic` now (-1 while none does)."""
        return partition_leader(self._admin(self.bootstrap), topic, partition)

    def client_config(self, user: str = "app") -> dict[str, str]:
        """librdkafka's settings to connect as `user` ("app" or "admin"): none for plaintext,
        the SCRAM login and CA for sasl_ssl, the CA and the user's certificate for mtls."""
        return client_settings(self.security, self.security_files, user)

    def untrusted_client_config(self, user: str = "app") -> dict[str, str]:
        """client_config(user) with material the cluster must refuse: a client certificate
        of another CA (mtls), or only that CA trusted, refusing the brokers' (sasl_ssl)."""
        return untrusted_client_settings(self.security, self.security_files, user)

    def write_client_properties(self, path: Path | str, user: str = "app") -> Path:
        """client_config(user) as a properties file (mode 0600), for --kafka-config-file."""
        return write_properties(path, self.client_config(user))

    # -- pieces of start -------------------------------------------------------------------

    def _ids(self) -> range:
        return range(1, self.nodes + 1)

    def _check_node(self, node_id: int) -> int:
        if node_id not in self._ids():
            raise LocalKafkaError(f"no node {node_id}: the node ids are 1 to {self.nodes}")
        return node_id

    def _addresses(self) -> list[NodeAddress]:
        return node_addresses(self.port, self.controller_port, self.nodes)

    def _pick_ports(self) -> None:
        # One node needs a client port and the controller's, free_port()'s default pair.
        self.port = free_port() if self.nodes == 1 else free_port(2 * self.nodes)
        self.controller_port = self.port + self.nodes

    def _check_ports(self) -> None:
        check_ports_free(self._addresses())

    def _prepare_security(self) -> None:
        if self.security is not Security.PLAINTEXT:
            self.security_files.create(formatted=bool(self._formatted()))

    def _formatted(self) -> list[int]:
        return [node for node in self._ids() if self.node_files(node).meta.exists()]

    def _log_sizes(self) -> dict[int, list[int]]:
        return {node: log_sizes(self.node_files(node)) for node in self._ids()}

    def _log_since(self, sizes: Mapping[int, list[int]]) -> str:
        """What the nodes' logs gained since _log_sizes() returned `sizes`."""
        return "".join(log_since(self.node_files(node), sizes[node]) for node in self._ids())

    def _write_config_files(self) -> None:
        quorum = self._addresses()
        secured = broker_security(self.security, self.security_files)
        for address in quorum:
            files = self.node_files(address.node_id)
            files.logs.mkdir(parents=True, exist_ok=True)
            settings = node_settings(
                address, quorum, files.kraft, self.security.protocol, secured, self.extra_config,
                self.proxied.get(address.node_id),
            )  # fmt: skip
            # Secured, it holds the brokers' SCRAM password: for its owner's eyes only.
            write_private(files.properties, render_properties(settings))
            files.log4j2.write_text(render_log4j2(files.log_file))
        record_shape(self.data_dir, self.shape)

    def _format_storage(self, java: str, classpath: str) -> None:
        # A formatted log dir keeps its cluster id; formatting again would refuse, and the
        # topics of an earlier run must survive a restart.
        formatted = self._formatted()
        pending = [node for node in self._ids() if node not in formatted]
        if not pending:
            return
        # Nodes formatted by an interrupted start keep their id; the others must share it.
        shared = next((self.node_files(node).cluster_id() for node in formatted), None)
        configs = [self.node_files(node).properties for node in pending]
        extra = format_arguments(self.security, self.security_files)
        results = jvm.format_storage(java, classpath, shared or cluster_id(), configs, extra)
        for node, result in zip(pending, results, strict=True):
            if result.returncode != 0:
                raise LocalKafkaError(
                    f"formatting {self.node_files(node).directory} failed:\n"
                    f"{result.stdout}{result.stderr}"
                )

    def _launch(self, node_id: int, java: str, classpath: str) -> subprocess.Popen[bytes]:
        directory = self.node_files(node_id).directory
        return jvm.launch_node(java, classpath, self.heap, directory, self.jvm_options)

    def _record(self, pids: Mapping[int, int]) -> None:
        self._state.write(pids, self.bootstrap, self.version, self.shape)

    def _admin(self, bootstrap: str) -> AdminClient:
        return admin_client(bootstrap, self.client_config("admin"))

    def _wait_until_ready(
        self, processes: Mapping[int, subprocess.Popen[bytes]], timeout: float
    ) -> None:
        """Until each node of `processes` answers a metadata request on its own address.
        Each admin client knows only its node, so the first answer it gets is that node's."""
        addresses = {address.node_id: address.client for address in self._addresses()}
        admins = {node: self._admin(addresses[node]) for node in processes}
        pending = set(processes)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for node in sorted(pending):
                if processes[node].poll() is not None:
                    raise BrokerExitedError(
                        f"{self._who(node)} exited with code {processes[node].returncode} "
                        f"during start. Last lines of its log "
                        f"({self.node_files(node).log_file}):\n{self.log_tail(node_id=node)}"
                    )
                # A lone node may have been given another node.id (extra_config): any will do.
                if answers(admins[node], None if self.nodes == 1 else node):
                    pending.discard(node)
            if pending:
                time.sleep(0.2)
        if pending:
            node = min(pending)
            raise LocalKafkaError(
                f"{self._who(node)} did not answer on {addresses[node]} within "
                f"{timeout:.0f}s. Last lines of its log:\n{self.log_tail(node_id=node)}"
            )

    def _who(self, node_id: int) -> str:
        return "the broker" if self.nodes == 1 else f"node {node_id}"

    def _recorded_bootstrap(self) -> str:
        return str(self._state.read().get("bootstrap", self.bootstrap))

    def _running_pids(self) -> dict[int, int]:
        return {node: pid for node, pid in self._state.pids().items() if jvm.is_our_broker(pid)}
