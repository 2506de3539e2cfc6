"""Where the test suite's Kafka broker comes from (see tests/conftest.py)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from globalstore.localkafka import ANY_PORT, LocalKafka

log = logging.getLogger(__name__)

KAFKA_IMAGE = "apache/kafka:4.1.1"


@contextlib.contextmanager
def kafka_bootstrap_source(scratch: Path) -> Iterator[str]:
    """Yield a bootstrap address: an existing cluster, a container, or the local broker."""
    given = os.environ.get("GLOBALSTORE_TEST_BOOTSTRAP")
    if given:
        log.info("tests use the cluster at %s", given)
        yield given
    elif docker_engine_answers():
        with kafka_container() as bootstrap:
            yield bootstrap
    else:
        broker = LocalKafka(port=ANY_PORT, data_dir=scratch / "broker", heap="768m")
        # Generous: a cold first run resolves the jars, and shared CI machines can be slow.
        broker.start(timeout=180)
        try:
            log.info("tests use the local broker at %s", broker.bootstrap)
            yield broker.bootstrap
        finally:
            broker.stop()


def docker_engine_answers() -> bool:
    try:
        import docker  # noqa: PLC0415 - comes with testcontainers, needed only here

        docker.from_env(timeout=3).ping()
    except Exception:  # any failure means: no engine we can use
        return False
    return True


@contextlib.contextmanager
def kafka_container() -> Iterator[str]:
    from testcontainers.kafka import KafkaContainer  # noqa: PLC0415

    with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
        yield container.get_bootstrap_server()
