"""The launcher's clusters and security without starting Kafka: each node's settings, the
certificates and users, the client settings and their file, the recorded state and shape,
and the validation of the options (library and CLI)."""

from __future__ import annotations

import errno
import json
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.kafka.settings import read_properties
from globalstore.localkafka import ClusterShape, LocalKafka, LocalKafkaError, Security
from globalstore.localkafka.broker import DEFAULT_HEAP, DEFAULT_NODE_HEAP, server_settings
from globalstore.localkafka.security import (
    SecurityFiles,
    broker_security,
    client_settings,
    format_arguments,
    untrusted_client_settings,
)
from globalstore.localkafka.settings import node_addresses, node_settings
from globalstore.localkafka.state import BrokerStatus, StateFile, recorded_shape


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SecurityFiles:
    """The material of a secured cluster, made once by the real openssl."""
    made = SecurityFiles(tmp_path_factory.mktemp("cluster") / "security")
    made.create(formatted=False)
    return made


# -- node settings -------------------------------------------------------------------------


def test_three_nodes_take_two_blocks_of_ports() -> None:
    addresses = node_addresses(9092, 9095, 3)
    assert [(a.node_id, a.client_port, a.controller_port) for a in addresses] == [
        (1, 9092, 9095),
        (2, 9093, 9096),
        (3, 9094, 9097),
    ]
    cluster = LocalKafka(port=9092, nodes=3)
    assert cluster.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert cluster.controller_port == 9095  # after the client ports, by default
    assert LocalKafka(port=9092).controller_port == 9093  # one node: as it always was


def test_each_node_of_three_is_a_voter_with_replicated_defaults(tmp_path: Path) -> None:
    quorum = node_addresses(9092, 9095, 3)
    props = node_settings(quorum[1], quorum, tmp_path / "kraft")
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9095,2@127.0.0.1:9096,3@127.0.0.1:9097"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9096"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9093"
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "share.coordinator.state.topic.replication.factor",
    ):
        assert props[key] == "3", key
    for key in (
        "min.insync.replicas",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.min.isr",
    ):
        assert props[key] == "2", key


@pytest.mark.parametrize(
    ("nodes", "replicas", "min_isr"), [(1, "1", "1"), (2, "2", "2"), (5, "3", "2")]
)
def test_replication_follows_the_node_count(nodes: int, replicas: str, min_isr: str) -> None:
    quorum = node_addresses(9092, 9092 + nodes, nodes)
    props = node_settings(quorum[0], quorum, "/kraft")
    assert props["default.replication.factor"] == props["offsets.topic.replication.factor"]
    assert props["default.replication.factor"] == replicas
    assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == min_isr


def test_a_lone_plaintext_node_keeps_its_settings() -> None:
    props = server_settings(9092, 9093, "/kraft")
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert not [key for key in props if key.startswith(("ssl.", "sasl."))]


def test_a_proxied_listener_tells_its_clients_the_proxy_and_brokers_keep_their_own() -> None:
    quorum = node_addresses(9092, 9095, 3)
    props = node_settings(quorum[1], quorum, "/kraft", proxied=(9100, "127.0.0.1:7001"))
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9096,PROXIED://127.0.0.1:9100"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9093,PROXIED://127.0.0.1:7001"
    assert props["listener.security.protocol.map"].endswith(",PROXIED:PLAINTEXT")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    with pytest.raises(ValueError, match="plaintext"):
        node_settings(quorum[1], quorum, "/kraft", "SASL_SSL", proxied=(9100, "127.0.0.1:7001"))


def test_sasl_ssl_secures_clients_and_brokers_with_scram(files: SecurityFiles) -> None:
    quorum = node_addresses(9092, 9095, 3)
    secured = broker_security(Security.SASL_SSL, files)
    props = node_settings(quorum[0], quorum, "/kraft", "SASL_SSL", secured)
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9095"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    jaas = props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert 'username="admin"' in jaas and files.password("admin") in jaas
    assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"
    assert props["ssl.truststore.location"] == str(files.ca.cert)
    assert "ssl.client.auth" not in props


def test_mtls_requires_client_certificates(files: SecurityFiles) -> None:
    secured = broker_security(Security.MTLS, files)
    assert secured["ssl.client.auth"] == "required"
    assert not [key for key in secured if key.startswith("sasl")]
    assert broker_security(Security.PLAINTEXT, files) == {}


def test_the_storage_tool_creates_both_scram_users_from_a_private_file(
    files: SecurityFiles,
) -> None:
    arguments = format_arguments(Security.SASL_SSL, files)
    assert arguments == [f"@{files.scram_arguments}"]  # no password on the command line
    assert files.scram_arguments.read_text().splitlines() == [
        "--add-scram",
        f"SCRAM-SHA-512=[name=admin,password={files.password('admin')}]",
        "--add-scram",
        f"SCRAM-SHA-512=[name=app,password={files.password('app')}]",
    ]
    assert stat.S_IMODE(files.scram_arguments.stat().st_mode) == 0o600
    assert format_arguments(Security.MTLS, files) == []


# -- certificates and users ----------------------------------------------------------------


def _verify(ca: Path, cert: Path) -> bool:
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), str(cert)], capture_output=True, check=False
    )
    return result.returncode == 0


def test_the_certificates_chain_to_their_own_ca_only(files: SecurityFiles) -> None:
    assert _verify(files.ca.cert, files.broker.cert)
    assert _verify(files.ca.cert, files.client("app").cert)
    assert not _verify(files.ca.cert, files.untrusted_client.cert)
    assert _verify(files.untrusted_ca.cert, files.untrusted_client.cert)
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-text", "-in", str(files.broker.cert)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    keystore = files.keystore.read_text()
    assert "PRIVATE KEY" in keystore and "CERTIFICATE" in keystore


def test_secrets_are_for_the_owner_only_and_made_once(files: SecurityFiles) -> None:
    for secret in (files.passwords, files.ca.key, files.keystore, files.client("app").key):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700
    assert len(files.password("app")) == 32 and files.password("app") != files.password("admin")
    before = files.password("admin")
    files.create(formatted=True)  # it exists: reused as it is
    assert files.password("admin") == before


def test_lost_material_of_a_formatted_cluster_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LocalKafkaError, match="--fresh"):
        SecurityFiles(tmp_path / "security").create(formatted=True)
    assert not (tmp_path / "security").exists()


# -- client settings -----------------------------------------------------------------------


def test_client_settings_use_librdkafka_names(files: SecurityFiles) -> None:
    assert client_settings(Security.PLAINTEXT, files, "app") == {}
    assert client_settings(Security.SASL_SSL, files, "app") == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "app",
        "sasl.password": files.password("app"),
        "ssl.ca.location": str(files.ca.cert),
    }
    assert client_settings(Security.MTLS, files, "admin") == {
        "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca.cert),
        "ssl.certificate.location": str(files.client("admin").cert),
        "ssl.key.location": str(files.client("admin").key),
    }
    with pytest.raises(ValueError, match="admin, app"):
        client_settings(Security.SASL_SSL, files, "root")


def test_untrusted_material_swaps_what_the_other_side_checks(files: SecurityFiles) -> None:
    mtls = untrusted_client_settings(Security.MTLS, files, "app")
    assert mtls["ssl.certificate.location"] == str(files.untrusted_client.cert)
    assert mtls["ssl.ca.location"] == str(files.ca.cert)
    sasl = untrusted_client_settings(Security.SASL_SSL, files, "app")
    assert sasl["ssl.ca.location"] == str(files.untrusted_ca.cert)
    with pytest.raises(LocalKafkaError, match="trusts anyone"):
        untrusted_client_settings(Security.PLAINTEXT, files, "app")


def test_the_properties_file_reads_back_as_the_same_settings(
    files: SecurityFiles, tmp_path: Path
) -> None:
    cluster = LocalKafka(data_dir=files.directory.parent, nodes=3, security="sasl_ssl")
    target = tmp_path / "sub" / "client.properties"
    target.parent.mkdir()
    target.write_text("stale=1\n")
    target.chmod(0o644)
    assert cluster.write_client_properties(target, user="app") == target
    assert read_properties(target) == cluster.client_config("app")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # also when the file was there
    assert all("=" in line for line in target.read_text().splitlines())


def test_the_properties_file_is_never_written_through_a_symlink(
    files: SecurityFiles, tmp_path: Path
) -> None:
    cluster = LocalKafka(data_dir=files.directory.parent, nodes=3, security="sasl_ssl")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    victim.chmod(0o644)
    planted = tmp_path / "client.properties"
    planted.symlink_to(victim)
    with pytest.raises(OSError) as raised:
        cluster.write_client_properties(planted, user="app")
    assert raised.value.errno == errno.ELOOP
    assert victim.read_text() == "mine\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_settings_of_a_cluster_never_started_say_so(tmp_path: Path) -> None:
    cluster = LocalKafka(data_dir=tmp_path, security="sasl_ssl")
    with pytest.raises(LocalKafkaError, match="start the cluster first"):
        cluster.client_config()


# -- validation, shape and state -----------------------------------------------------------


def test_unknown_security_and_node_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="'plaintext', 'sasl_ssl', 'mtls', not 'tls'"):
        LocalKafka(security="tls")
    with pytest.raises(ValueError, match="at least 1, not 0"):
        LocalKafka(nodes=0)
    with pytest.raises(ValueError, match="overlap"):
        LocalKafka(port=9092, controller_port=9093, nodes=3)
    with pytest.raises(LocalKafkaError, match="node ids are 1 to 3"):
        LocalKafka(nodes=3).node_files(4)


def test_heap_is_smaller_per_node_of_a_cluster() -> None:
    assert LocalKafka().heap == DEFAULT_HEAP
    assert LocalKafka(nodes=3).heap == DEFAULT_NODE_HEAP
    assert LocalKafka(nodes=3, heap="768m").heap == "768m"
    assert LocalKafka().jvm_options == [] and LocalKafka(nodes=3).jvm_options


def test_a_data_dir_restarts_only_in_the_shape_it_was_formatted_for(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text('{"nodes": 3, "security": "sasl_ssl"}')
    assert recorded_shape(tmp_path) == ClusterShape(3, Security.SASL_SSL)
    with pytest.raises(LocalKafkaError, match="--nodes 3 --security sasl_ssl"):
        LocalKafka(data_dir=tmp_path, cache_dir=tmp_path / "cache").start()
    assert not (tmp_path / "cache").exists()  # refused before anything was resolved


def test_an_old_single_node_data_dir_is_recognised(tmp_path: Path) -> None:
    assert recorded_shape(tmp_path) is None
    (tmp_path / "kraft").mkdir()
    (tmp_path / "kraft" / "meta.properties").write_text("node.id=1\n")
    assert recorded_shape(tmp_path) == ClusterShape()


def test_the_state_file_records_every_node(tmp_path: Path) -> None:
    state = StateFile(tmp_path)
    state.write({2: 202, 1: 101, 3: 303}, "b", "4.1.1", ClusterShape(3, Security.MTLS))
    recorded = json.loads(state.path.read_text())
    assert recorded["pid"] == 101 and recorded["security"] == "mtls"
    assert state.pids() == {1: 101, 2: 202, 3: 303}
    assert state.shape() == ClusterShape(3, Security.MTLS)
    state.path.write_text('{"pid": 42, "bootstrap": "127.0.0.1:9092"}')  # before clusters
    assert state.pids() == {1: 42}


def test_status_describes_a_cluster_node_by_node(tmp_path: Path) -> None:
    shape = ClusterShape(3, Security.SASL_SSL)
    status = BrokerStatus(True, 11, "b", tmp_path, "4.1.1", {1: 11, 3: 33}, shape)
    text = status.describe()
    assert "running (2 of 3 nodes: node 1 pid 11, node 3 pid 33)" in text
    assert "cluster:   3-node sasl_ssl" in text
    alone = BrokerStatus(True, 11, "b", tmp_path, "4.1.1", {1: 11}).describe()
    assert "running (pid 11)" in alone and "cluster:" not in alone


@pytest.mark.parametrize(
    ("option", "message"),
    [(["--security", "tls"], "'tls' is not one of"), (["--nodes", "0"], "0 is not in the range")],
)
def test_cli_refuses_unknown_options_before_starting(
    tmp_path: Path, option: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["kafka", "start", "--data-dir", str(tmp_path), *option])
    assert result.exit_code == 2 and message in result.output
    assert list(tmp_path.iterdir()) == []
