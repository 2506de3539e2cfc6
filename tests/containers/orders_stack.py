"""The orders stack of compose/ as the container tests bring it up and check it: its
settings, starting it on free ports, and what both app instances must serve."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.orders.generator import RawRecord, StreamShape, generate
from tests.containers.compose_project import (
    COMPOSE_FILE,
    ComposeProject,
    compose_commands,
    get_json,
)
from tests.ports import PortTakenError, on_a_free_port, says_port_taken
from tests.waiting import eventually

ORDERS = 1500  # the generator's --bad 1% is one broken record in 100, its seed 7
APP_PORT = 8080
SAMPLE = 25
# The host port of each broker, in node order (docker-compose.yml has the first, cluster.yml
# the other two).
BROKER_PORT_VARIABLES = ("KAFKA_PORT", "KAFKA_PORT_2", "KAFKA_PORT_3")


def generator_records() -> list[RawRecord]:
    """The raw events the stack's generator service produces (`--orders ORDERS --bad 1%`,
    its default seed 7)."""
    return generate(StreamShape(orders=ORDERS, bad_every=100), seed=7)


def compose_ids() -> list[str]:
    """The compose implementations to run a test with, as parameter ids."""
    return [" ".join(command) for command in compose_commands()] or ["no compose found"]


def stack_up(
    compose: list[str], files: Sequence[Path] = (COMPOSE_FILE,), brokers: int = 1
) -> tuple[ComposeProject, list[int]]:
    """The stack, up, and its brokers' host ports (consecutive, from one picked free). The
    engine publishes them later and each broker advertises its own, so they must be known
    first: if something took one in between, `up` fails saying so; take the stack down and
    try other ports."""

    def start(port: int) -> tuple[ComposeProject, list[int]]:
        ports = [port + node for node in range(brokers)]
        env = {BROKER_PORT_VARIABLES[node]: str(ports[node]) for node in range(brokers)}
        env["ORDERS"] = str(ORDERS)
        project = ComposeProject(compose, f"gstest{uuid.uuid4().hex[:8]}", env, files)
        try:
            project.run("up", "-d", "--no-build", "--scale", "app=2", timeout=600)
        except AssertionError as exc:
            project.down()
            if says_port_taken(str(exc)):
                raise PortTakenError(str(exc)) from exc
            raise
        return project, ports

    return on_a_free_port(start)


def host_bootstrap(ports: Sequence[int]) -> str:
    """The brokers' addresses for a client on the host."""
    return ",".join(f"127.0.0.1:{port}" for port in ports)


def check_both_serve_the_expected_orders(
    project: ComposeProject, apps: list[str], expected: dict[str, dict[str, Any]]
) -> None:
    """Both instances ready, holding exactly `expected` (waiting for the stream-mode pipeline
    to fold the last events) and giving the same answers for a sample of keys."""
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
