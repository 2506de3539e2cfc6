"""The orders pipeline on a secured broker: every client over SASL_SSL with SCRAM-SHA-512
(tests/secured_cluster.py, one node: the security is the point here, not replication).

- `pipeline generate` and `pipeline run` (batch) with the settings in a properties file:
  the compacted output equals the reference model's (pipelines/orders/reference.py);
- stream mode with the same settings picks up events produced while it runs;
- a wrong password fails within 30 s in one line that says authentication and shows no
  secret and no stack trace: on the librdkafka side (the CLI, before Spark starts) and on
  the Java side (an explicit sasl.jaas.config, so only Spark's source is refused);
- over mutual TLS (a second one-node broker, for a moment) the client certificate and key
  reach Spark's Java clients as a PEM keystore;
- the plans Spark shows redact every secret option, a PEM key among them.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from globalstore.cli import main
from globalstore.errors import AuthenticationError
from globalstore.localkafka import LocalKafka
from pipelines import skeleton
from pipelines.java_clients import spark_kafka_options
from pipelines.orders.generator import RawRecord, StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.orders.transform import ORDERS
from pipelines.topics import ensure_topic
from tests.pipelines.kafka_read import compacted_json, read_topic
from tests.secured_cluster import secured_cluster
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.integration]

GLOBALSTORE = str(Path(sys.executable).parent / "globalstore")
AUTH_DEADLINE_S = 30.0
ORDERS_GENERATED = 120
BAD_SHARE = "2%"  # one broken record per 50 good ones


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with secured_cluster(tmp_path_factory.mktemp("secured"), nodes=1) as started:
        yield started


@pytest.fixture(scope="module")
def settings(cluster: LocalKafka, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipeline's client settings, in a properties file as a user would keep them."""
    directory = tmp_path_factory.mktemp("client")
    return Path(cluster.write_client_properties(directory / "client.properties", user="app"))


@pytest.fixture(scope="module")
def raw(cluster: LocalKafka, settings: Path) -> tuple[str, list[RawRecord]]:
    """A raw topic filled by `pipeline generate` over SASL_SSL, and what it holds."""
    topic = f"secured-raw-{uuid.uuid4().hex[:8]}"
    argv = ["pipeline", "generate", "orders", "--orders", str(ORDERS_GENERATED),
            "--bad", BAD_SHARE, "--topic", topic, "--partitions", "2", "--bootstrap-servers",
            cluster.bootstrap, "--kafka-config-file", str(settings)]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    return topic, generate(StreamShape(orders=ORDERS_GENERATED, bad_every=50), seed=7)


def _app(cluster: LocalKafka) -> dict[str, str]:
    return dict(cluster.client_config(user="app"))


def _active(cluster: LocalKafka, topic: str) -> dict[str, Any]:
    return compacted_json(cluster.bootstrap, topic, _app(cluster))


def test_batch_run_over_sasl_ssl_writes_the_reference_orders(
    spark: SparkSession,
    cluster: LocalKafka,
    settings: Path,
    raw: tuple[str, list[RawRecord]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the launcher's .globalstore/logs/spark.log goes here
    source, records = raw
    target, dead = f"secured-current-{uuid.uuid4().hex[:8]}", f"secured-dlq-{uuid.uuid4().hex[:8]}"
    argv = ["pipeline", "run", "orders", "--bootstrap-servers", cluster.bootstrap,
            "--kafka-config-file", str(settings), "--source-topic", source,
            "--target-topic", target, "--dead-letter-topic", dead,
            "--checkpoint-dir", str(tmp_path / "checkpoint")]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    expected = ExpectedOrders()
    expected.run(records)
    assert _active(cluster, target) == expected.active()
    broken = sum(record.bad_reason is not None for record in records)
    assert len(read_topic(cluster.bootstrap, dead, kafka_config=_app(cluster))) == broken
    assert f"dead_lettered={broken}" in result.stdout


def test_stream_mode_over_sasl_ssl_follows_new_events(
    spark: SparkSession, cluster: LocalKafka, raw: tuple[str, list[RawRecord]], tmp_path: Path
) -> None:
    source, records = raw
    options = _options(cluster, source, tmp_path, mode="stream")
    later = generate(StreamShape(orders=10, bad_every=0), seed=8, first_order=5000)
    expected = ExpectedOrders()
    expected.run(records)
    expected.run(later)
    running = skeleton.start(spark, ORDERS, options)
    try:
        progress = lambda: (running.summary.describe(), running.query.status)  # noqa: E731
        eventually(lambda: running.summary.batches > 0, 120, progress)
        produce(cluster.bootstrap, source, later, _app(cluster))
        eventually(lambda: _active(cluster, options.target_topic) == expected.active(), 120,
                   progress)  # fmt: skip
        assert running.query.isActive
    finally:
        running.stop()


def test_a_wrong_password_fails_fast_in_one_line_before_spark_starts(
    cluster: LocalKafka, raw: tuple[str, list[RawRecord]], tmp_path: Path
) -> None:
    wrong = {**_app(cluster), "sasl.password": "not-the-password-8c1d"}
    properties = tmp_path / "wrong.properties"
    properties.write_text("".join(f"{name}={value}\n" for name, value in wrong.items()))
    began = time.monotonic()
    failed = subprocess.run(
        [GLOBALSTORE, "pipeline", "run", "orders", "--bootstrap-servers", cluster.bootstrap,
         "--kafka-config-file", str(properties), "--source-topic", raw[0],
         "--checkpoint-dir", str(tmp_path / "checkpoint")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert time.monotonic() - began < AUTH_DEADLINE_S
    assert failed.returncode == 2, failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), failed.stderr
    assert "authentication" in lines[0].lower()
    assert wrong["sasl.password"] not in failed.stderr + failed.stdout
    print(lines[0])  # the line itself, for a report (pytest -s)


def test_a_password_only_java_gets_wrong_fails_the_spark_job_in_one_line(
    spark: SparkSession, cluster: LocalKafka, raw: tuple[str, list[RawRecord]], tmp_path: Path
) -> None:
    # librdkafka (the admin client) gets the right password; the explicit JAAS line, which
    # only the Java clients see, a wrong one: the failure comes from Spark's Kafka source.
    secret = "wrong-password-51f2"
    app = _app(cluster)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{app["sasl.username"]}" password="{secret}";'
    )
    options = _options(cluster, raw[0], tmp_path, kafka_config={**app, "sasl.jaas.config": jaas})
    began = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        skeleton.run(spark, ORDERS, options)
    assert time.monotonic() - began < AUTH_DEADLINE_S
    said = str(info.value)
    assert "\n" not in said and "authentication" in said.lower(), said
    assert secret not in said and "Streaming Query" not in said and "\tat " not in said
    # With -v the user sees the whole chain: Spark's exception is the cause. Its plan shows
    # the source's options, the JAAS line redacted.
    assert secret not in str(info.value.__cause__)
    print(said)


def test_mtls_client_certificate_reaches_sparks_java_clients(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The translation's other half: the client's certificate and key, read at the driver,
    # reach the Java clients as a PEM keystore (the broker requires a client certificate).
    with secured_cluster(tmp_path / "mtls", nodes=1, security="mtls") as mtls:
        app = _app(mtls)
        assert "ssl.key.location" in app and "sasl.username" not in app
        source = f"mtls-raw-{uuid.uuid4().hex[:8]}"
        records = generate(StreamShape(orders=20, bad_every=0), seed=9)
        ensure_topic(mtls.bootstrap, source, 1, app)
        produce(mtls.bootstrap, source, records, app)
        options = _options(mtls, source, tmp_path)
        assert skeleton.run(spark, ORDERS, options).clean == len(records)
        expected = ExpectedOrders()
        expected.run(records)
        assert _active(mtls, options.target_topic) == expected.active()


def test_spark_plans_redact_every_secret_option(spark: SparkSession) -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQ\n-----END PRIVATE KEY-----\n"
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "app",
        "sasl.password": "pw-7a0c",
        "ssl.certificate.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        "ssl.key.pem": key,
        "ssl.key.password": "kp-99e1",
    }
    options = spark_kafka_options(settings, "127.0.0.1:1")
    frame = spark.readStream.format("kafka").options(**options).option("subscribe", "t").load()
    plan = frame._jdf.queryExecution().toString()  # what explain() and the UI show
    assert "kafka.ssl.keystore.key=*********(redacted)" in plan, plan
    for secret in ("MIIEvQIBADANBgkqhkiG9w0BAQ", "pw-7a0c", "kp-99e1"):
        assert secret not in plan


def _options(
    cluster: LocalKafka,
    source: str,
    tmp_path: Path,
    mode: str = "batch",
    kafka_config: dict[str, str] | None = None,
) -> skeleton.RunOptions:
    run = uuid.uuid4().hex[:8]
    return skeleton.RunOptions(
        bootstrap_servers=cluster.bootstrap,
        source_topic=source,
        target_topic=f"secured-current-{run}",
        dead_letter_topic=f"secured-dlq-{run}",
        checkpoint_dir=tmp_path / f"checkpoint-{run}",
        mode="stream" if mode == "stream" else "batch",
        kafka_config=kafka_config or _app(cluster),
    )
