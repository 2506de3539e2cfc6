"""One bootstrap variable for every command group (no broker is started here)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from globalstore.cli import main


def test_kafka_commands_take_their_port_from_the_bootstrap_variable(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["kafka", "status", "--data-dir", str(tmp_path)],
        env={"GLOBALSTORE_BOOTSTRAP": "127.0.0.1:39871"},
    )
    assert "127.0.0.1:39871" in result.output, result.output


def test_a_remote_bootstrap_leaves_the_local_broker_port_alone(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["kafka", "status", "--data-dir", str(tmp_path)],
        env={"GLOBALSTORE_BOOTSTRAP": "kafka.example:39871"},
    )
    assert "127.0.0.1:9092" in result.output, result.output
