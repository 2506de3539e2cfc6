"""A checkpoint is bound to the Kafka cluster and topics it was written against, on real
Kafka (the session's broker and a second local one) and real Spark.

The trap it closes: a second cluster whose raw topic holds the same events at the same
offsets. Resumed from the first cluster's checkpoint, Spark saw nothing new and the run
"succeeded" with an empty output topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from globalstore.cli import main
from globalstore.localkafka import ANY_PORT, LocalKafka
from pipelines import skeleton
from pipelines.checkpoint import BINDING_FILE, CheckpointRefused
from pipelines.orders.generator import StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from tests.conftest import wait_until_served
from tests.pipelines.kafka_read import compacted_json
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 2


@pytest.fixture
def cluster_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second single-node cluster: another cluster id, topics of its own."""
    broker = LocalKafka(port=ANY_PORT, data_dir=tmp_path_factory.mktemp("cluster-b"), heap="512m")
    broker.start(timeout=180)
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _create_raw(bootstrap: str, topic: str) -> None:
    """The raw topic on `bootstrap`; retried while a deletion of the same name completes."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 1, config={"cleanup.policy": "delete"})

    def created() -> bool:
        try:
            admin.create_topics([new])[topic].result(timeout=30)
        except KafkaException:
            return False
        return True

    eventually(created, 60, lambda: admin.list_topics(topic, timeout=10).topics.get(topic))
    wait_until_served(admin, topic, PARTITIONS)


def _run(bootstrap: str, topics: list[str], checkpoint: Path, *flags: str):  # type: ignore[no-untyped-def]
    source, target, dead_letter = topics
    argv = ["pipeline", "run", "orders", "--bootstrap-servers", bootstrap, "--source-topic",
            source, "--target-topic", target, "--dead-letter-topic", dead_letter,
            "--checkpoint-dir", str(checkpoint), *flags]  # fmt: skip
    return CliRunner().invoke(main, argv)


def test_a_checkpoint_of_cluster_a_is_refused_on_cluster_b_until_reset(
    spark: SparkSession, kafka_bootstrap: str, cluster_b: str, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = [f"orders-raw-{suffix}", f"orders-current-{suffix}", f"orders-dlq-{suffix}"]
    events = generate(StreamShape(orders=80, bad_every=30), seed=5)
    checkpoint = tmp_path / "checkpoint"
    for bootstrap in (kafka_bootstrap, cluster_b):  # the same events at the same offsets
        _create_raw(bootstrap, topics[0])
        produce(bootstrap, topics[0], events)
    expected = ExpectedOrders().run(events).active()

    first = _run(kafka_bootstrap, topics, checkpoint)
    assert first.exit_code == 0, first.output
    assert compacted_json(kafka_bootstrap, topics[1]) == expected

    refused = _run(cluster_b, topics, checkpoint)
    assert refused.exit_code == 2, refused.output
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in refused.output, refused.output
    assert f"checkpoint {checkpoint}: it was written on Kafka cluster " in errors[0]
    assert "rerun with --reset" in errors[0]

    reset = _run(cluster_b, topics, checkpoint, "--reset")
    assert reset.exit_code == 0, reset.output
    assert compacted_json(cluster_b, topics[1]) == expected
    # Nothing lost: the old checkpoint is beside the new one, its binding with it.
    (aside,) = tmp_path.glob("checkpoint.reset-*")
    assert (aside / BINDING_FILE).exists() and (aside / "offsets").is_dir()
    assert f"--reset: moved to {aside}" in reset.stderr


def test_a_recreated_raw_topic_is_refused_and_explained(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path, make_topic: Callable[..., str]
) -> None:
    options = skeleton.RunOptions(
        bootstrap_servers=kafka_bootstrap,
        source_topic=make_topic(partitions=PARTITIONS, compact=False, prefix="orders-raw"),
        target_topic=f"orders-current-{uuid.uuid4().hex[:10]}",
        dead_letter_topic=f"orders-dlq-{uuid.uuid4().hex[:10]}",
        checkpoint_dir=tmp_path / "checkpoint",
    )
    produce(kafka_bootstrap, options.source_topic, generate(StreamShape(orders=60), seed=1))
    skeleton.run(spark, ORDERS, options)

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([options.source_topic])[options.source_topic].result(timeout=30)
    _create_raw(kafka_bootstrap, options.source_topic)
    produce(kafka_bootstrap, options.source_topic, generate(StreamShape(orders=5), seed=2))
    with pytest.raises(CheckpointRefused, match=r"\(recreated\); rerun with --reset") as refused:
        skeleton.run(spark, ORDERS, options)
    assert f"topic {options.source_topic} was id " in str(refused.value)

    # A checkpoint from before bindings were recorded: the offsets still tell.
    for stale in tmp_path.glob(f"checkpoint/*{BINDING_FILE}*"):
        stale.unlink()
    with pytest.raises(CheckpointRefused, match=r"ahead of raw topic .* ends at \d+, not \d+"):
        skeleton.run(spark, ORDERS, options)
