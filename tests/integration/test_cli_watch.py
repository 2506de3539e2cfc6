"""`globalstore status --watch` against a real store, owned or held by another process."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from globalstore import GlobalStore
from globalstore.cli import main
from tests.integration.store_support import produce


def _watch(bootstrap: str, topic: str, path: Path) -> list[str]:
    argv = ["status", "--topic", topic, "--bootstrap-servers", bootstrap, "--path", str(path)]
    result = CliRunner().invoke(main, [*argv, "--watch", "--interval", "0.1", "--count", "3"])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_watch_a_store_it_opens_and_one_an_application_holds(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(40)])
    lines = _watch(kafka_bootstrap, topic, tmp_path / "s")
    assert len(lines) == 3 and all(" running keys=40 " in line for line in lines), lines
    assert all("lag=0 {0:0 1:0}" in line for line in lines), lines
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s"):
        held = _watch(kafka_bootstrap, topic, tmp_path / "s")
    assert len(held) == 3 and all(" offline keys=40 " in line for line in held), held
