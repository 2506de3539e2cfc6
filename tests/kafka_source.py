"""Where the test suite's Kafka broker comes from (see tests/conftest.py).

In order: GLOBALSTORE_TEST_BOOTSTRAP (an existing cluster); a container started through
testcontainers when a Docker engine answers and the Kafka image is on the machine or can be
pulled; else the project's own local broker. GLOBALSTORE_TEST_BROKER=container makes the
container mandatory (`make test-containers`): no engine or no image is then an error.

The image is GLOBALSTORE_TEST_KAFKA_IMAGE, apache/kafka:4.1.1 by default, or one configured
the same way: KAFKA_* variables are broker settings (compose/kafka builds such an image).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from globalstore.localkafka import ANY_PORT, LocalKafka
from globalstore.localkafka.broker import cluster_id, server_settings
from tests.ports import PortTakenError, on_a_free_port, says_port_taken

log = logging.getLogger(__name__)

KAFKA_IMAGE = os.environ.get("GLOBALSTORE_TEST_KAFKA_IMAGE", "apache/kafka:4.1.1")
CONTAINER_FORCED = os.environ.get("GLOBALSTORE_TEST_BROKER") == "container"
_CONTROLLER_PORT = 9093
_STARTED_LINE = "Kafka Server started"  # KafkaRaftServer's last line of a good start
_START_TIMEOUT_S = 180


@contextlib.contextmanager
def kafka_bootstrap_source(scratch: Path, say: Callable[[str], None]) -> Iterator[str]:
    """Yield a bootstrap address: an existing cluster, a container, or the local broker.

    `say` prints one line on the terminal: why a container was not used."""
    given = os.environ.get("GLOBALSTORE_TEST_BOOTSTRAP")
    if given:
        log.info("tests use the cluster at %s", given)
        yield given
        return
    client = docker_client()
    missing = "no Docker engine answers" if client is None else image_missing(client, KAFKA_IMAGE)
    if missing is None:
        with kafka_container(KAFKA_IMAGE) as bootstrap:
            yield bootstrap
        return
    if CONTAINER_FORCED:
        raise RuntimeError(f"GLOBALSTORE_TEST_BROKER=container, but {missing}")
    if client is not None:  # an engine but no image: worth a line, the user expected one
        say(f"testcontainers: {missing}; the tests use the local broker")
    with local_broker(scratch) as bootstrap:
        yield bootstrap


def docker_client() -> Any:
    """A docker-py client when an engine answers, else None."""
    try:
        import docker  # noqa: PLC0415 - comes with testcontainers, needed only here

        client = docker.from_env(timeout=3)
        client.ping()
    except Exception:  # any failure means: no engine we can use
        return None
    return client


def image_missing(client: Any, image: str) -> str | None:
    """None when `image` is on the machine or was just pulled, else why it cannot be had."""
    import docker.errors  # noqa: PLC0415

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        try:
            client.images.pull(image)
        except docker.errors.APIError as exc:
            reason = str(exc.explanation or exc).splitlines()[0]
            return f"the image {image} is not on this machine and cannot be pulled ({reason})"
    return None


@contextlib.contextmanager
def local_broker(scratch: Path) -> Iterator[str]:
    broker = LocalKafka(port=ANY_PORT, data_dir=scratch / "broker", heap="768m")
    # Generous: a cold first run resolves the jars, and shared CI machines can be slow.
    broker.start(timeout=180)
    try:
        log.info("tests use the local broker at %s", broker.bootstrap)
        yield broker.bootstrap
    finally:
        broker.stop()


def container_environment(port: int) -> dict[str, str]:
    """The local broker's settings as KAFKA_* variables, for a broker in a container whose
    client port `port` is published on the host's 127.0.0.1 under the same number."""
    settings = server_settings(
        port,
        _CONTROLLER_PORT,
        "/tmp/kafka-logs",  # writable in apache/kafka's image and ours
        {
            "listeners": f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://localhost:{_CONTROLLER_PORT}",
            "controller.quorum.voters": f"1@localhost:{_CONTROLLER_PORT}",
        },
    )
    environment = {
        "KAFKA_" + key.replace("_", "__").replace(".", "_").upper(): value
        for key, value in settings.items()
    }
    return {**environment, "KAFKA_HEAP_OPTS": "-Xms768m -Xmx768m", "CLUSTER_ID": cluster_id()}


@contextlib.contextmanager
def kafka_container(image: str) -> Iterator[str]:
    from testcontainers.core.config import testcontainers_config  # noqa: PLC0415

    client = docker_client()
    if image_missing(client, testcontainers_config.ryuk_image) is not None:
        # Ryuk removes containers a crashed run left behind; without its image the
        # container is still removed when this context ends.
        testcontainers_config.ryuk_disabled = True
    container, port = _started_container(client, image)
    try:
        bootstrap = f"127.0.0.1:{port}"
        wait_for_broker(bootstrap)
        log.info("tests use the %s container at %s", image, bootstrap)
        yield bootstrap
    finally:
        container.stop()


def _started_container(client: Any, image: str) -> tuple[Any, int]:
    """The broker container, started, and its client port. The advertised address must be
    known before the broker starts, so the port is picked here and published under the same
    number on 127.0.0.1: if something took it in between, start again on another one."""
    import docker.errors  # noqa: PLC0415

    def start(port: int) -> tuple[Any, int]:
        name = f"globalstore-test-kafka-{uuid.uuid4().hex[:8]}"
        try:
            return _start_container(image, port, name), port
        except docker.errors.APIError as exc:
            if not says_port_taken(str(exc)):
                raise
            with contextlib.suppress(docker.errors.NotFound):
                client.containers.get(name).remove(force=True)
            raise PortTakenError(f"port {port}: {exc}") from exc

    return on_a_free_port(start)


def _start_container(image: str, port: int, name: str) -> Any:
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy  # noqa: PLC0415

    container = DockerContainer(image, name=name).waiting_for(
        LogMessageWaitStrategy(_STARTED_LINE).with_startup_timeout(_START_TIMEOUT_S)
    )
    for key, value in container_environment(port).items():
        container.with_env(key, value)
    container.ports[f"{port}/tcp"] = ("127.0.0.1", port)  # with_bind_ports binds 0.0.0.0
    return container.start()


def wait_for_broker(bootstrap: str, timeout: float = 30.0) -> None:
    """Return once a client at `bootstrap` sees the broker (its advertised address works)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": "0"})
    deadline = time.monotonic() + timeout
    error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=1.0).brokers:
                return
        except Exception as exc:  # not up yet: try again until the deadline
            error = exc
        time.sleep(0.2)
    raise TimeoutError(f"the broker container at {bootstrap} did not answer in {timeout}s: {error}")
