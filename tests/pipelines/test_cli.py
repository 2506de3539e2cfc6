"""The click commands: flags, defaults, errors, the package zip (no Spark started)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from globalstore import end_offsets
from globalstore.cli import main
from globalstore.errors import ConfigurationError
from pipelines import skeleton
from pipelines.cli import pipeline, run
from pipelines.orders.generator import StreamShape, generate
from pipelines.package import ENTRY_NAME, ZIP_NAME
from pipelines.topics import ensure_topics

REWRITE_ARGS = ["--source-topic", "a", "--target-topic", "b", "--value-format", "2",
                "--converter", "tests.value_formats:v1_to_v2"]  # fmt: skip


def test_run_help_lists_every_flag_with_defaults() -> None:
    result = CliRunner().invoke(pipeline, ["run", "--help"])
    assert result.exit_code == 0
    flags = ("--bootstrap-servers", "--source-topic", "--target-topic", "--dead-letter-topic",
             "--checkpoint-dir", "--mode", "--trigger-interval", "--starting-offsets",
             "--max-offsets-per-trigger", "--kafka-config", "--kafka-config-file",
             "GLOBALSTORE_KAFKA_CONFIG_FILE")  # fmt: skip
    for flag in flags:
        assert flag in result.output
    assert "127.0.0.1:9092" in result.output
    assert "--kafka-option" not in result.output  # deprecated: still taken, not shown


def test_unknown_pipeline_is_a_usage_error() -> None:
    result = CliRunner().invoke(pipeline, ["run", "nosuch"])
    assert result.exit_code == 2
    assert "known pipelines: couriers, orders" in result.output


def test_globalstore_command_lists_and_runs_the_pipeline_group() -> None:
    # `globalstore pipeline ...` is loaded lazily from pipelines/: it must still be listed
    # and reach the same command.
    listing = CliRunner().invoke(main, ["--help"])
    assert "pipeline" in listing.output
    result = CliRunner().invoke(main, ["pipeline", "run", "nosuch"])
    assert result.exit_code == 2
    assert "known pipelines: couriers, orders" in result.output


def test_kafka_config_must_be_key_value() -> None:
    result = CliRunner().invoke(pipeline, ["run", "orders", "--kafka-config", "novalue"])
    assert result.exit_code == 2
    assert "expected KEY=VALUE" in result.output


@pytest.mark.parametrize("command", [["run", "orders"], ["rewrite", *REWRITE_ARGS]])
def test_a_setting_java_cannot_take_is_refused_before_anything_connects(
    command: list[str],
) -> None:
    # No broker listens at port 1: the refusal comes first, in one line, naming the setting.
    argv = [*command, "--bootstrap-servers", "127.0.0.1:1"]
    result = CliRunner().invoke(
        pipeline, [*argv, "--kafka-config", "enable.ssl.certificate.verification=false"]
    )
    assert result.exit_code == 2, result.output
    assert "'enable.ssl.certificate.verification' has no translation" in result.output
    assert "Traceback" not in result.output


def test_run_options_refuse_a_setting_java_cannot_take() -> None:
    # For a caller of the library too, before the admin client creates any topic.
    with pytest.raises(ConfigurationError, match=r"'zz\.top' has no translation"):
        skeleton.RunOptions("b:1", "raw", "current", "dlq", "/tmp/c", kafka_config={"zz.top": "1"})


def test_the_deprecated_kafka_option_still_reaches_the_settings() -> None:
    result = CliRunner().invoke(pipeline, ["run", "orders", "--kafka-option", "zz.top=1"])
    assert result.exit_code == 2
    assert "--kafka-option is deprecated; use --kafka-config" in result.stderr
    assert "'zz.top' has no translation" in result.output


def test_kafka_config_reaches_source_sink_and_admin_client() -> None:
    options = skeleton.RunOptions(
        bootstrap_servers="broker:9092",
        source_topic="raw",
        target_topic="current",
        dead_letter_topic="dlq",
        checkpoint_dir="s3a://bucket/checkpoint",
        kafka_config={
            "sasl.jaas.config": "Login required;",  # Java only: librdkafka never sees it
            "security.protocol": "NOPE",
            "bootstrap.servers": "ignored:1",
        },
    )
    assert options.spark_kafka_options() == {
        "kafka.sasl.jaas.config": "Login required;",
        "kafka.security.protocol": "NOPE",
        "kafka.request.timeout.ms": "5000",  # the failover defaults (java_clients.FAILOVER)
        "kafka.default.api.timeout.ms": "5000",
        "kafka.bootstrap.servers": "broker:9092",
    }
    # librdkafka checks the value when the admin client is built: the setting got there,
    # and the Java one did not (librdkafka would refuse its name first).
    with pytest.raises(ConfigurationError, match=r"security\.protocol") as refused:
        ensure_topics("127.0.0.1:1", "raw", "current", "dlq", options.kafka_config)
    assert "jaas" not in str(refused.value)


def test_package_is_importable_without_the_project(tmp_path: Path) -> None:
    result = CliRunner().invoke(pipeline, ["package", "--output-dir", str(tmp_path / "dist")])
    assert result.exit_code == 0, result.output
    archive, entry = tmp_path / "dist" / ZIP_NAME, tmp_path / "dist" / ENTRY_NAME
    assert result.output.split() == [str(archive), str(entry)]
    # `python -S` skips the .pth hook of the editable install: only the zip provides them.
    check = (
        "import pipelines.registry, pipelines.cli, globalstore.codec;"
        "print(pipelines.registry.__file__, globalstore.codec.__file__)"
    )
    site = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": f"{archive}{os.pathsep}{site}"}
    imported = subprocess.run(
        [sys.executable, "-S", "-c", check],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert all(path.startswith(str(archive)) for path in imported.stdout.split())
    assert "from pipelines.cli import run" in entry.read_text()


def test_a_missing_raw_topic_is_one_line_before_spark_starts(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(
        main,
        ["pipeline", "run", "orders", "--source-topic", "absent.raw"],
        env={"GLOBALSTORE_BOOTSTRAP": kafka_bootstrap},
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'absent.raw' does not exist" in lines[0], result.stderr
    assert "pipeline generate orders" in lines[0] and "Traceback" not in result.output


def test_the_spark_submit_entry_fails_in_one_line_too(kafka_bootstrap: str) -> None:
    # spark-submit runs `run` itself, with no `globalstore` group above to explain errors.
    result = CliRunner().invoke(
        run,
        ["orders", "--source-topic", "absent.raw"],
        env={"GLOBALSTORE_BOOTSTRAP": kafka_bootstrap},
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: raw topic 'absent.raw' does not exist at {kafka_bootstrap}: put events on it "
        "first (sample ones: `globalstore pipeline generate orders`)"
    ]


def test_generate_puts_sample_events_on_the_raw_topic(kafka_bootstrap: str) -> None:
    topic = f"generated-{uuid.uuid4().hex[:8]}"
    argv = ["pipeline", "generate", "orders", "--orders", "200", "--bad", "2%", "--topic", topic]
    result = CliRunner().invoke(main, argv, env={"GLOBALSTORE_BOOTSTRAP": kafka_bootstrap})
    assert result.exit_code == 0, result.output
    records = generate(StreamShape(orders=200, bad_every=50), seed=7)
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == len(records)
    assert len(end_offsets(kafka_bootstrap, topic)) == 3  # created with --partitions' default
    broken = sum(r.bad_reason is not None for r in records)
    assert f"{len(records):,} raw events for 200 orders ({broken:,} broken)" in result.stdout


def test_a_bad_share_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["pipeline", "generate", "orders", "--bad", "lots"])
    assert result.exit_code == 2 and "expected a share like 1% or 0.01" in result.output


def test_a_target_that_is_not_compacted_is_one_line(kafka_bootstrap: str, make_topic) -> None:
    source = make_topic(partitions=1, compact=False)
    target = make_topic(partitions=1, compact=False)
    env = {"GLOBALSTORE_BOOTSTRAP": kafka_bootstrap}
    assert CliRunner().invoke(main, ["pipeline", "generate", "orders", "--orders", "5",
                                     "--topic", source], env=env).exit_code == 0  # fmt: skip
    result = CliRunner().invoke(
        main,
        ["pipeline", "run", "orders", "--source-topic", source, "--target-topic", target],
        env=env,
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.output and lines[-1].startswith("error: "), result.stderr
    assert f"topic {target!r} has cleanup.policy='delete', not compact" in lines[-1]
    assert "choose another --target-topic" in lines[-1]


def test_rewrite_names_a_converter_it_cannot_find_before_spark_starts() -> None:
    args = ["rewrite", "--source-topic", "a", "--target-topic", "b", "--value-format", "2"]
    result = CliRunner().invoke(pipeline, [*args, "--converter", "tests.value_formats:nope"])
    assert result.exit_code == 2 and "has no function 'nope'" in result.output, result.output


def test_avro_flags_are_checked_before_anything_connects(tmp_path: Path) -> None:
    avsc = tmp_path / "e.avsc"
    avsc.write_text("{}")
    offline = ["--bootstrap-servers", "127.0.0.1:1"]
    both = ["--schema-registry", "http://127.0.0.1:1", "--avro-schema", str(avsc)]
    result = CliRunner().invoke(pipeline, ["run", "orders", *offline, *both])
    assert result.exit_code == 2
    assert "--schema-registry and --avro-schema exclude each other" in result.output
    result = CliRunner().invoke(pipeline, ["generate", "orders", *offline, "--format", "avro"])
    assert result.exit_code == 2
    assert "--format avro takes one of --schema-registry, --avro-schema" in result.output


def test_a_subject_the_registry_lacks_is_one_line_before_spark_starts(
    schema_registry: str,
) -> None:
    argv = ["run", "orders", "--bootstrap-servers", "127.0.0.1:1"]
    result = CliRunner().invoke(run, [*argv[1:], "--schema-registry", schema_registry])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: the schema registry at http://127.0.0.1:")
    assert "Subject 'orders.raw-value' not found." in result.output
    assert "Traceback" not in result.output
