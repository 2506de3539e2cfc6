"""The compose stack (compose/docker-compose.yml) up for real: Kafka, Spark master and
worker, the orders pipeline under spark-submit in stream mode, the generator and two
`globalstore serve` instances. Run by `make test-containers`, on the images it builds."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from globalstore.topic import end_offsets
from pipelines.orders.generator import StreamShape, generate
from pipelines.orders.reference import ExpectedOrders
from tests.containers.compose_project import (
    ComposeProject,
    compose_commands,
    docker,
    get_json,
)
from tests.ports import PortTakenError, on_a_free_port, says_port_taken
from tests.waiting import eventually

ORDERS = 1500  # the generator's --bad 1% is one broken record in 100, its seed 7
APP_PORT = 8080
SAMPLE = 25


@pytest.fixture(scope="module")
def expected() -> dict[str, dict[str, Any]]:
    """What the generator's events fold into, by the plain-Python model of the rules."""
    records = generate(StreamShape(orders=ORDERS, bad_every=100), seed=7)
    return ExpectedOrders().run(records).active()


def _compose_ids() -> list[str]:
    return [" ".join(command) for command in compose_commands()] or ["no compose found"]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("compose", _compose_ids())
def test_stack_serves_the_pipeline_output_and_survives_an_app_restart(
    compose: str, expected: dict[str, dict[str, Any]]
) -> None:
    assert compose != "no compose found", "neither `docker compose` nor `docker-compose` runs"
    project, kafka_port = _stack_up(compose.split())
    try:
        apps = project.container_ids("app")
        assert len(apps) == 2, f"expected two app containers, got {apps}"
        _check_both_serve_the_expected_orders(project, apps, expected)
        _check_restart_resumes_from_its_volume(project, apps[1], len(expected))
        _check_kafka_keeps_its_topics_on_its_volume(project, f"127.0.0.1:{kafka_port}")
    finally:
        project.down()
    assert project.leftovers() == {}, "`down --volumes` left these behind"


def _stack_up(compose: list[str]) -> tuple[ComposeProject, int]:
    """The stack, up, and Kafka's host port. The port is picked free and published by the
    engine later (the broker advertises it, so it must be known first): if something took
    it in between, `up` fails saying so; take the stack down and try another port."""

    def start(port: int) -> tuple[ComposeProject, int]:
        env = {"KAFKA_PORT": str(port), "ORDERS": str(ORDERS)}
        project = ComposeProject(compose, f"gstest{uuid.uuid4().hex[:8]}", env)
        try:
            project.run("up", "-d", "--no-build", "--scale", "app=2", timeout=600)
        except AssertionError as exc:
            project.down()
            if says_port_taken(str(exc)):
                raise PortTakenError(str(exc)) from exc
            raise
        return project, port

    return on_a_free_port(start)


def _check_both_serve_the_expected_orders(
    project: ComposeProject, apps: list[str], expected: dict[str, dict[str, Any]]
) -> None:
    bases = [project.http_base(app, APP_PORT) for app in apps]

    def counts() -> list[Any]:
        return [get_json(f"{base}/v1/count") for base in bases]

    def status() -> str:
        return f"counts {counts()}, expected {len(expected)}\n" + project.logs(
            "pipeline", "app", "generator"
        )

    for base in bases:
        eventually(
            lambda base=base: get_json(f"{base}/readyz")[0] == 200, 600, status, interval_s=1.0
        )
    # Ready means restored; the stream-mode pipeline may still be folding the events.
    eventually(
        lambda: counts() == [(200, {"count": len(expected)})] * 2, 600, status, interval_s=1.0
    )

    keys = sorted(expected)[:: max(1, len(expected) // SAMPLE)]
    for key in keys:
        answers = [get_json(f"{base}/v1/keys/{key}") for base in bases]
        assert answers[0] == answers[1], f"the instances disagree on {key}: {answers}"
        code, entry = answers[0]
        assert code == 200, f"{key}: {answers[0]}"
        assert entry["value"] == expected[key], f"{key}: {entry} != {expected[key]}"


def _check_restart_resumes_from_its_volume(project: ComposeProject, app: str, count: int) -> None:
    docker("restart", "--time", "20", app)
    base = project.http_base(app, APP_PORT)  # the published port may have changed

    def status() -> str:
        return json.dumps(get_json(f"{base}/v1/status"), indent=1) + project.logs("app")

    eventually(lambda: get_json(f"{base}/readyz")[0] == 200, 300, status, interval_s=1.0)
    code, report = get_json(f"{base}/v1/status")
    assert code == 200, report
    restore = report["restore"]
    # A full restore starts from offset 0 on every partition and reads every record again.
    assert report["rebuild_reason"] is None, report
    assert restore["start_offsets_total"], f"restored from the beginning: {report}"
    assert restore["records_restored"] < count, f"restored everything again: {report}"
    assert get_json(f"{base}/v1/count") == (200, {"count": count})


def _check_kafka_keeps_its_topics_on_its_volume(project: ComposeProject, bootstrap: str) -> None:
    topics = ("orders.raw", "orders.current")
    before = {topic: end_offsets(bootstrap, topic) for topic in topics}
    assert all(sum(offsets.values()) for offsets in before.values()), before
    # A new container on the same volume: only the log dirs carry the topics over.
    project.run("rm", "--stop", "--force", "kafka")
    project.run("up", "-d", "--no-build", "--no-deps", "kafka")

    def now() -> dict[str, Any]:
        try:
            return {topic: end_offsets(bootstrap, topic, 2.0, log_level=0) for topic in topics}
        except Exception as exc:  # not back yet
            return {"error": repr(exc)}

    def status() -> str:
        return f"{now()} != {before}\n{project.logs('kafka')}"

    eventually(lambda: now() == before, 180, status, interval_s=1.0)
