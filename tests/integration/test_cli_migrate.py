"""`globalstore migrate status|run|switch` against a real broker."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from globalstore.cli import main
from tests.integration.store_support import produce
from tests.integration.test_cli_store import one_line_error
from tests.unit.shaping.test_migrate import make_v0_store

N = 300


def _migrate(*args: str) -> Result:
    return CliRunner().invoke(main, ["migrate", *args])


def _store_args(bootstrap: str, topic: str, path: Path) -> list[str]:
    return ["--topic", topic, "--bootstrap-servers", bootstrap, "--path", str(path)]


def test_status_and_run_convert_an_old_layout(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i:04d}", {"i": i}) for i in range(N)])
    make_v0_store(tmp_path / "s", N, topic)
    before = _migrate("status", "--path", str(tmp_path / "s"))
    assert before.exit_code == 0 and "layout:         0" in before.stdout, before.output

    result = _migrate("run", *_store_args(kafka_bootstrap, topic, tmp_path / "s"))
    assert result.exit_code == 0, result.output
    assert f"converted {N} values" in result.stderr, result.stderr

    after = _migrate("status", "--path", str(tmp_path / "s"))
    assert "layout:         1" in after.stdout and "migrating from: -" in after.stdout, after.stdout


def test_switch_restores_the_new_store_then_removes_the_old(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    v1, v2 = make_topic(partitions=1), make_topic(partitions=2)
    produce(kafka_bootstrap, v1, [("a", {"v": 1})])
    produce(kafka_bootstrap, v2, [("a", {"v": 2}), ("b", {"v": 2})])
    restored = CliRunner().invoke(
        main, ["restore", *_store_args(kafka_bootstrap, v1, tmp_path / "v1")]
    )
    assert restored.exit_code == 0, restored.output
    new = _store_args(kafka_bootstrap, v2, tmp_path / "v2")
    result = _migrate("switch", *new, "--from-path", str(tmp_path / "v1"), "--remove-old")
    assert result.exit_code == 0, result.output
    assert "ready: 2 keys" in result.stdout and not (tmp_path / "v1").exists()


def test_switch_never_removes_a_directory_that_is_not_a_store(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    new = _store_args(kafka_bootstrap, topic, tmp_path / "v2")
    result = _migrate("switch", *new, "--from-path", str(precious), "--remove-old")
    one_line_error(result, "no store at")
    assert (precious / "keep.txt").read_text() == "mine"
