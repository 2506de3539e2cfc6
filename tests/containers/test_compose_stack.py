"""The compose stack (compose/docker-compose.yml) up for real: Kafka, Spark master and
worker, the orders pipeline under spark-submit in stream mode, the generator and two
`globalstore serve` instances. Run by `make test-containers`, on the images it builds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from globalstore.follow.topic import end_offsets
from tests.containers.compose_project import ComposeProject, docker, get_json
from tests.containers.orders_stack import (
    APP_PORT,
    check_both_serve_the_expected_orders,
    compose_ids,
    host_bootstrap,
    stack_up,
)
from tests.waiting import eventually


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("compose", compose_ids())
def test_stack_serves_the_pipeline_output_and_survives_an_app_restart(
    compose: str, expected: dict[str, dict[str, Any]]
) -> None:
    assert compose != "no compose found", "neither `docker compose` nor `docker-compose` runs"
    project, kafka_ports = stack_up(compose.split())
    try:
        apps = project.container_ids("app")
        assert len(apps) == 2, f"expected two app containers, got {apps}"
        check_both_serve_the_expected_orders(project, apps, expected)
        _check_restart_resumes_from_its_volume(project, apps[1], len(expected))
        _check_kafka_keeps_its_topics_on_its_volume(project, host_bootstrap(kafka_ports))
    finally:
        project.down()
    assert project.leftovers() == {}, "`down --volumes` left these behind"


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
