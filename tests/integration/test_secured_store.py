"""The store on a cluster shaped like a company's: three KRaft nodes, replication factor 3,
min ISR 2, every client over SASL_SSL with SCRAM-SHA-512 (tests/secured_cluster.py).

- the library and the CLI restore more than 100k records (so the C loop runs with the
  security settings), then follow, and `serve` answers behind the same settings;
- a wrong password, an unknown user or a broker certificate the client does not trust fail
  within 30 s, in one line that says authentication and quotes no secret;
- over mutual TLS (one node) a store restores and follows with its client certificate, and
  one signed by another CA is refused as fast;
- a leader killed, a node down during a cold restore and a rolling restart, under a producer
  and three reader threads: no read raises, both stores end equal to the topic.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from globalstore import AuthenticationError, GlobalStore
from globalstore.codec import encode_key, encode_value, format_headers, parse_json
from globalstore.follow.topic import end_offsets
from globalstore.localkafka import LocalKafka
from tests.integration.serve_support import serving_process
from tests.integration.store_support import produce, producer
from tests.secured_cluster import secured_cluster

GLOBALSTORE = str(Path(sys.executable).parent / "globalstore")
BIG = 120_000  # above the bulk threshold (50k): the restore takes the C loop
PARTITIONS = 3
AUTH_DEADLINE = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with secured_cluster(tmp_path_factory.mktemp("secured"), nodes=3) as started:
        yield started


@pytest.fixture(scope="module")
def big_topic(cluster: LocalKafka) -> str:
    topic = _topic(cluster)
    records = ((f"k-{i:06d}", {"n": i}) for i in range(BIG))
    produce(cluster.bootstrap, topic, records, **cluster.client_config("admin"))
    return topic


@pytest.fixture(scope="module")
def mtls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with secured_cluster(tmp_path_factory.mktemp("mtls"), nodes=1, security="mtls") as started:
        yield started


def _topic(cluster: LocalKafka) -> str:
    """A compacted topic with the cluster's defaults: replication factor 3, min ISR 2."""
    name = f"secured-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **cluster.client_config("admin")})
    new = NewTopic(name, PARTITIONS, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[name].result(timeout=60)
    return name


def _app(cluster: LocalKafka) -> dict[str, str]:
    return cluster.client_config("app")


def test_library_restores_with_the_c_loop_then_follows(
    cluster: LocalKafka, big_topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="globalstore")
    app = _app(cluster)
    with GlobalStore(big_topic, cluster.bootstrap, tmp_path / "s", kafka_config=app) as store:
        assert f"restoring {big_topic} with the C loop" in caplog.text
        assert store.count() == BIG
        assert store["k-000007"] == {"n": 7} and store[f"k-{BIG - 1:06d}"] == {"n": BIG - 1}
        updates = [("k-000007", None), ("k-new", {"n": -1})]
        produce(cluster.bootstrap, big_topic, updates, **cluster.client_config("admin"))
        assert store.wait_for(end_offsets(cluster.bootstrap, big_topic, **app), timeout=60)
        assert "k-000007" not in store and store["k-new"] == {"n": -1}
        assert app["sasl.password"] not in repr(store.config)


def test_cli_restores_and_serve_answers_with_settings_from_a_file(
    cluster: LocalKafka, big_topic: str, tmp_path: Path
) -> None:
    settings = cluster.write_client_properties(tmp_path / "client.properties", user="app")
    where = ["--topic", big_topic, "--bootstrap-servers", cluster.bootstrap]
    path = ["--path", str(tmp_path / "s")]
    restored = _cli("restore", *where, *path, "--kafka-config-file", str(settings))
    assert restored.returncode == 0, restored.stderr
    env = {**os.environ, "GLOBALSTORE_KAFKA_CONFIG_FILE": str(settings)}
    counted = _cli("count", *where, *path, env=env)
    assert counted.returncode == 0, counted.stderr
    assert int(counted.stdout) >= BIG - 1  # the library test may have deleted one key
    proc, base = serving_process([GLOBALSTORE, "serve", *where, *path], env)
    try:
        assert httpx.get(f"{base}/v1/keys/k-000008").json()["value"] == {"n": 8}
        key = f"served-{uuid.uuid4().hex[:6]}"
        produce(cluster.bootstrap, big_topic, [(key, {"n": 1})], **cluster.client_config("admin"))
        ends = end_offsets(cluster.bootstrap, big_topic, **_app(cluster))
        spec = ",".join(f"{p}:{o}" for p, o in ends.items())
        found = httpx.get(f"{base}/v1/keys/{key}", params={"min_position": spec}, timeout=30)
        assert found.status_code == 200 and found.json()["value"] == {"n": 1}
    finally:
        proc.terminate()
        proc.wait(30)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GLOBALSTORE, *args], capture_output=True, text=True, env=env, timeout=180, check=False
    )


WRONG = ["wrong password", "unknown user", "untrusted broker certificate"]


def _wrong_settings(cluster: LocalKafka, kind: str) -> dict[str, str]:
    settings = dict(_app(cluster))
    if kind == "wrong password":
        settings["sasl.password"] = "not-" + settings["sasl.password"]
    elif kind == "unknown user":
        settings["sasl.username"] = "nobody"
    else:
        settings = cluster.untrusted_client_config()  # a CA that signed none of the brokers
    return settings


@pytest.mark.parametrize("kind", WRONG)
def test_refused_credentials_fail_fast_in_one_line(
    cluster: LocalKafka, big_topic: str, tmp_path: Path, kind: str
) -> None:
    settings = _wrong_settings(cluster, kind)
    began = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        GlobalStore(big_topic, cluster.bootstrap, tmp_path / "s", kafka_config=settings).start(
            timeout=120
        )
    assert time.monotonic() - began < AUTH_DEADLINE
    assert "authentication" in str(info.value)
    assert settings["sasl.password"] not in str(info.value)

    properties = tmp_path / "client.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    began = time.monotonic()
    where = ["--topic", big_topic, "--bootstrap-servers", cluster.bootstrap]
    failed = _cli(
        "count", *where, "--path", str(tmp_path / "cli"), "--kafka-config-file", str(properties)
    )
    assert time.monotonic() - began < AUTH_DEADLINE
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), failed.stderr
    assert "authentication" in lines[0]
    assert settings["sasl.password"] not in failed.stderr


def test_mtls_restores_and_follows_and_an_untrusted_certificate_is_refused(
    mtls_node: LocalKafka, tmp_path: Path
) -> None:
    topic = _topic(mtls_node)
    admin = mtls_node.client_config("admin")
    produce(mtls_node.bootstrap, topic, [("a", {"n": 1}), ("b", {"n": 2})], **admin)
    app = mtls_node.client_config("app")
    with GlobalStore(topic, mtls_node.bootstrap, tmp_path / "s", kafka_config=app) as store:
        assert dict(store.items()) == {"a": {"n": 1}, "b": {"n": 2}}
        produce(mtls_node.bootstrap, topic, [("a", None)], **admin)
        assert store.wait_for(end_offsets(mtls_node.bootstrap, topic, **app), timeout=30)
        assert dict(store.items()) == {"b": {"n": 2}}
    untrusted = mtls_node.untrusted_client_config()
    began = time.monotonic()
    with pytest.raises(AuthenticationError, match="certificate"):
        GlobalStore(topic, mtls_node.bootstrap, tmp_path / "u", kafka_config=untrusted).start(
            timeout=120
        )
    assert time.monotonic() - began < AUTH_DEADLINE


# -- failover ------------------------------------------------------------------------------


class Writer(threading.Thread):
    """Produces updates to a few thousand keys, acks=all, until stopped."""

    def __init__(self, cluster: LocalKafka, topic: str) -> None:
        super().__init__(name="failover-writer", daemon=True)
        self.producer = producer(cluster.bootstrap, acks="all", **cluster.client_config("admin"))
        self.topic = topic
        self.stopped = threading.Event()
        self.failed: list[str] = []
        self.written = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            for _ in range(200):
                key = f"f-{random.randrange(3000):04d}"
                value = None if self.written % 50 == 49 else {"n": self.written}
                self._send(key, value)
            self.producer.poll(0.05)
        assert self.producer.flush(120) == 0

    def _send(self, key: str, value: Any) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topic, key=encode_key(key), value=encode_value(value),
                    headers=format_headers(), on_delivery=self._delivered,
                )  # fmt: skip
                self.written += 1
                return
            except BufferError:
                self.producer.poll(0.05)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))


class Readers:
    """Three threads calling get on random keys; any exception is kept, never raised."""

    def __init__(self, store: GlobalStore) -> None:
        self.store = store
        self.stopped = threading.Event()
        self.errors: list[BaseException] = []
        self.reads = 0
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(3)]
        for thread in self.threads:
            thread.start()

    def _read(self) -> None:
        while not self.stopped.is_set():
            try:
                self.store.get(f"f-{random.randrange(3000):04d}")
                self.reads += 1
            except BaseException as exc:  # every kind is reported, none ends the thread
                self.errors.append(exc)
            time.sleep(0.0005)

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(10)


def _topic_content(cluster: LocalKafka, topic: str) -> dict[str, Any]:
    """The topic read independently, start to end: the last value of every key."""
    app = _app(cluster)
    ends = end_offsets(cluster.bootstrap, topic, **app)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "independent",
                         "enable.partition.eof": True, **app})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    content: dict[str, Any] = {}
    pending = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            key = msg.key().decode()
            if msg.value() is None:
                content.pop(key, None)
            else:
                content[key] = parse_json(msg.value(), msg.key(), topic)
    consumer.close()
    assert not pending, f"partitions {pending} not read to their end"
    return content


def _fully_replicated(cluster: LocalKafka, topic: str) -> None:
    """Until every partition of `topic` has all replicas in sync (before the next node goes
    down, so no partition drops below min ISR)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **cluster.client_config("admin")})
    deadline = time.monotonic() + 120
    while True:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        if all(len(p.isrs) == len(p.replicas) == 3 for p in partitions):
            return
        assert time.monotonic() < deadline, "replicas did not catch up within 120 s"
        time.sleep(0.5)


def test_failover_leader_kill_node_down_restore_and_rolling_restart(
    cluster: LocalKafka, tmp_path: Path
) -> None:
    topic = _topic(cluster)
    app = _app(cluster)
    writer = Writer(cluster, topic)
    writer.start()
    with GlobalStore(topic, cluster.bootstrap, tmp_path / "a", kafka_config=app) as first:
        readers = Readers(first)
        time.sleep(3)
        leader = cluster.leader_of(topic, 0)  # killed with kill -9, then back
        cluster.stop_node(leader, signal.SIGKILL)
        time.sleep(5)
        cluster.start_node(leader)
        _fully_replicated(cluster, topic)

        down = 1 + leader % 3  # another node, down while a second store cold-restores
        cluster.stop_node(down)
        second = GlobalStore(topic, cluster.bootstrap, tmp_path / "b", kafka_config=app)
        second.start(timeout=120)
        cluster.start_node(down)
        _fully_replicated(cluster, topic)

        for node in sorted(cluster.node_pids()):  # rolling restart, SIGTERM each in turn
            cluster.stop_node(node)
            cluster.start_node(node)
            _fully_replicated(cluster, topic)

        writer.stopped.set()
        writer.join(180)
        ends = end_offsets(cluster.bootstrap, topic, **app)
        try:
            for store in (first, second):
                assert store.wait_for(ends, timeout=60), store.status()
                assert sum(store.status().lag.values()) == 0
            readers.stop()
            expected = _topic_content(cluster, topic)
            assert dict(first.items()) == expected
            assert dict(second.items()) == expected
        finally:
            second.close()
    assert writer.failed == [] and writer.written > 0
    assert readers.errors == [] and readers.reads > 0
