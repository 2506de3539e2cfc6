"""Pure logic and error paths of the local broker launcher (no broker is started here)."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from globalstore.localkafka import JarResolutionError, JavaError
from globalstore.localkafka.broker import (
    LocalKafka,
    PortInUseError,
    cluster_id,
    render_server_properties,
)
from globalstore.localkafka.jars import resolve_kafka_jars
from globalstore.localkafka.java import check_java, parse_java_major
from globalstore.localkafka.ports import lost_port_race
from tests.ports import closed_port


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_server_properties_fit_a_single_node(tmp_path: Path) -> None:
    props = _properties(render_server_properties(9092, 9093, tmp_path / "kraft"))
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["log.dirs"] == str(tmp_path / "kraft")
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_extra_settings_override_the_defaults(tmp_path: Path) -> None:
    text = render_server_properties(
        9092, 9093, tmp_path, {"num.partitions": "6", "log.cleaner.backoff.ms": "500"}
    )
    props = _properties(text)
    assert props["num.partitions"] == "6"
    assert props["log.cleaner.backoff.ms"] == "500"
    assert text.count("\nnum.partitions=") == 1


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "25.0.1" 2025-10-21 LTS', 25),
    ],
)
def test_java_major_version_is_parsed(output: str, major: int) -> None:
    assert parse_java_major(output) == major


def _fake_java(directory: Path, version_line: str) -> None:
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)


def test_old_java_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path, 'java version "1.8.0_392"')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaError, match=r"Java 8; Kafka 4 needs Java 17\+.*JAVA_HOME"):
        check_java()


def test_missing_java_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaError, match="no Java runtime found"):
        check_java()


def test_java_home_wins_over_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "home" / "bin").mkdir(parents=True)
    _fake_java(tmp_path / "home" / "bin", 'openjdk version "11.0.2"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "home"))
    with pytest.raises(JavaError, match="Java 11"):
        check_java()


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        broker = LocalKafka(port=port, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
        with pytest.raises(PortInUseError, match=rf"port {port} .*--port"):
            broker.start()
    # Nothing was resolved or written: the check runs first.
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "data" / "server.properties").exists()


def test_a_lost_port_race_is_told_from_other_start_failures() -> None:
    bind = (
        "[2026-01-01 00:00:00,000] ERROR Exiting Kafka due to fatal exception during startup.\n"
        "org.apache.kafka.common.KafkaException: Socket server failed to bind to "
        "127.0.0.1:40001: Address already in use.\nCaused by: java.net.BindException: "
        "Address already in use\n"
    )
    assert lost_port_race(bind)
    assert not lost_port_race("Stored node id 1 doesn't match previous node id 2")
    assert not lost_port_race("")


def test_unreachable_repository_on_first_use_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with closed_port() as port:  # nothing listens there: like being offline
        monkeypatch.setenv("GLOBALSTORE_MAVEN_REPO", f"http://127.0.0.1:{port}/maven2")
        with pytest.raises(JarResolutionError, match="first use"):
            resolve_kafka_jars("4.1.1", cache_dir=tmp_path)
    # A failed resolve leaves nothing that would pass for a usable cache.
    assert not (tmp_path / "kafka" / "4.1.1" / "lib").exists()


def test_status_of_a_never_started_broker(tmp_path: Path) -> None:
    status = LocalKafka(port=39092, data_dir=tmp_path).status()
    assert not status.running
    assert status.pid is None
    assert status.bootstrap == "127.0.0.1:39092"
    assert "stopped" in status.describe()


def test_cluster_ids_never_look_like_an_option() -> None:
    # One random id in 64 used to begin with "-", and the storage tool refused it.
    ids = [cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)
