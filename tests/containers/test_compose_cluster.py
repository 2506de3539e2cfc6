"""The compose stack on three Kafka brokers (compose/cluster.yml over
compose/docker-compose.yml): replication factor 3 and min ISR 2, every client given all three
brokers, and the stack working on with one broker killed. Run by `make test-containers`,
on the images it builds."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource

from pipelines.orders.generator import StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from tests.containers.compose_project import (
    CLUSTER_FILE,
    COMPOSE_FILE,
    ComposeProject,
    docker,
)
from tests.containers.orders_stack import (
    ORDERS,
    check_both_serve_the_expected_orders,
    compose_ids,
    generator_records,
    host_bootstrap,
    stack_up,
)
from tests.waiting import eventually

FILES = (COMPOSE_FILE, CLUSTER_FILE)
BROKERS = {1: "kafka", 2: "kafka-2", 3: "kafka-3"}  # node id -> service, as cluster.yml has them
ALL_BROKERS = "kafka:9092,kafka-2:9092,kafka-3:9092"
CLIENTS = ("generator", "pipeline", "app")
TOPICS = ("orders.raw", "orders.current", "orders.deadletter")  # the generator creates them
HOST_LISTENER = 9094  # the container port each broker publishes for the host
EXTRA_ORDERS = 300  # produced with one broker down; new order ids, after the generator's
# What every broker must say, for new topics and for the internal ones.
REPLICATION = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}


@pytest.mark.parametrize("compose", compose_ids())
def test_every_client_is_given_all_three_brokers(compose: str) -> None:
    """The override as each compose implementation merges it (`config`, nothing started):
    the single-node `kafka:9092` is left in no client's settings or command."""
    assert compose != "no compose found", "neither `docker compose` nor `docker-compose` runs"
    project = ComposeProject(compose.split(), "gsconfig", {}, FILES)
    services = yaml.safe_load(project.run("config", timeout=60))["services"]
    assert set(BROKERS.values()) <= set(services), sorted(services)
    for client in CLIENTS:
        assert services[client]["environment"]["GLOBALSTORE_BOOTSTRAP"] == ALL_BROKERS, client
    for name, service in services.items():
        assert "kafka:9092" not in json.dumps(service.get("command")), f"{name} names one broker"


# Only the first compose implementation: the test above shows both merge the override the
# same way, and one more run of the whole stack would add minutes to every CI run.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("compose", compose_ids()[:1])
def test_three_brokers_replicate_and_the_stack_works_on_with_one_down(
    compose: str, expected: dict[str, dict[str, Any]]
) -> None:
    assert compose != "no compose found", "neither `docker compose` nor `docker-compose` runs"
    project, ports = stack_up(compose.split(), FILES, brokers=len(BROKERS))
    try:
        brokers = {node: project.container_ids(name) for node, name in BROKERS.items()}
        assert all(len(ids) == 1 for ids in brokers.values()), brokers
        for (container,) in brokers.values():
            project.http_base(container, HOST_LISTENER)  # fails unless on 127.0.0.1 only
        apps = project.container_ids("app")
        assert len(apps) == 2, f"expected two app containers, got {apps}"
        check_both_serve_the_expected_orders(project, apps, expected)

        admin = AdminClient({"bootstrap.servers": host_bootstrap(ports)})
        _check_replication(admin, project)
        # The leader of a partition the apps read: its partitions must move to the others.
        victim = admin.list_topics("orders.current", timeout=30).topics["orders.current"]
        (killed,) = brokers[victim.partitions[0].leader]
        docker("kill", killed)

        # New orders, written through the two brokers left: the pipeline must fold them and
        # both instances follow, with writes acknowledged by the two in-sync replicas.
        more = generate(StreamShape(orders=EXTRA_ORDERS, bad_every=100), seed=8, first_order=ORDERS)
        produce(host_bootstrap(ports), "orders.raw", more)
        everything = ExpectedOrders().run(generator_records() + more).active()
        assert len(everything) > len(expected), "the new orders change nothing to check"
        check_both_serve_the_expected_orders(project, apps, everything)
        running = docker("inspect", "-f", "{{.State.Running}}", killed)
        assert running == "false", "the killed broker came back before the checks ended"

        docker("start", killed)
        _check_all_replicas_in_sync(admin, project)
    finally:
        project.down()
    assert project.leftovers() == {}, "`down --volumes` left these behind"


def _check_replication(admin: AdminClient, project: ComposeProject) -> None:
    """Every broker's settings, and the pipeline's topics as created: three replicas on
    every partition, all in sync, and min.insync.replicas 2 in effect."""
    for node in BROKERS:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(node))
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert {name: configs[name].value for name in REPLICATION} == REPLICATION, node
    topics = admin.list_topics(timeout=30).topics
    for topic in TOPICS:
        replicas = {p.id: sorted(p.replicas) for p in topics[topic].partitions.values()}
        assert set(map(tuple, replicas.values())) == {tuple(BROKERS)}, f"{topic}: {replicas}"
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert configs["min.insync.replicas"].value == "2", topic
    _check_all_replicas_in_sync(admin, project)


def _check_all_replicas_in_sync(admin: AdminClient, project: ComposeProject) -> None:
    """Every partition of the pipeline's topics has all three brokers in its ISR (a
    restarted broker first catches up on what it missed)."""

    def isrs() -> dict[str, Any]:
        try:
            topics = admin.list_topics(timeout=10).topics
        except Exception as exc:  # a broker's metadata may lag just after a restart
            return {"error": repr(exc)}
        return {
            f"{topic}/{p.id}": sorted(p.isrs)
            for topic in TOPICS
            for p in topics[topic].partitions.values()
        }

    def all_in_sync() -> bool:
        found = isrs()
        return "error" not in found and all(isr == list(BROKERS) for isr in found.values())

    def status() -> str:
        return f"{isrs()}\n" + project.logs(*BROKERS.values())

    eventually(all_in_sync, 180, status, interval_s=1.0)
