"""The click command: flags, defaults and the unknown-pipeline error (no Spark started)."""

from __future__ import annotations

from click.testing import CliRunner

from globalstore.cli import main
from pipelines.cli import pipeline


def test_run_help_lists_every_flag_with_defaults() -> None:
    result = CliRunner().invoke(pipeline, ["run", "--help"])
    assert result.exit_code == 0
    flags = ("--bootstrap-servers", "--source-topic", "--target-topic", "--dead-letter-topic",
             "--checkpoint-dir", "--mode", "--trigger-interval", "--starting-offsets")  # fmt: skip
    for flag in flags:
        assert flag in result.output
    assert "127.0.0.1:9092" in result.output


def test_unknown_pipeline_is_a_usage_error() -> None:
    result = CliRunner().invoke(pipeline, ["run", "nosuch"])
    assert result.exit_code == 2
    assert "known pipelines: orders" in result.output


def test_globalstore_command_lists_and_runs_the_pipeline_group() -> None:
    # `globalstore pipeline ...` is loaded lazily from pipelines/: it must still be listed
    # and reach the same command.
    listing = CliRunner().invoke(main, ["--help"])
    assert "pipeline" in listing.output
    result = CliRunner().invoke(main, ["pipeline", "run", "nosuch"])
    assert result.exit_code == 2
    assert "known pipelines: orders" in result.output
