"""The orders job on a real Spark standalone cluster, submitted as docs/pipelines.md says.

The master and the worker are separate JVMs started from the pyspark installation. The
job is packaged with `globalstore pipeline package` and submitted from a scratch directory
(not the repository) by a Python that cannot import the project, so the code can only
reach the driver and the executor through --py-files. Proof that it ran on the cluster:
the master lists the application as finished, and the worker's executor log shows tasks.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipelines.orders.generator import StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from tests.pipelines.kafka_read import compacted, read_topic
from tests.pipelines.spark_cluster import SPARK_HOME, standalone_cluster, without_project_env
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.integration]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "pipelines.md"
SUBMIT_TIMEOUT_S = 300


def documented_commands() -> list[list[str]]:
    """The commands of the docs' cluster example (the code block that uses --py-files)."""
    blocks = re.findall(r"```\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    block = next(b for b in blocks if "--py-files" in b)
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def with_values(command: list[str], values: dict[str, str]) -> list[str]:
    """`command` with the value after each flag in `values` replaced."""
    out = list(command)
    for flag, value in values.items():
        out[out.index(flag) + 1] = value
    return out


def test_documented_spark_submit_runs_on_a_standalone_cluster(
    tmp_path: Path, kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    records = generate(StreamShape(orders=80, bad_every=25), seed=11)
    source = make_topic(partitions=2, compact=False, prefix="cluster-raw")
    produce(kafka_bootstrap, source, records)
    target, dead = f"{source}-current", f"{source}-dlq"
    workdir = tmp_path / "submit"  # not the repository
    workdir.mkdir()
    env = without_project_env(tmp_path, sys.executable, sysconfig.get_paths()["purelib"])
    package, submit = documented_commands()
    assert package[:3] == ["globalstore", "pipeline", "package"]
    assert submit[0] == "spark-submit"
    subprocess.run(
        [str(Path(sys.executable).parent / "globalstore"), *package[1:]], cwd=workdir, check=True
    )

    with standalone_cluster(tmp_path, env) as cluster:
        command = with_values(
            submit,
            {
                "--master": cluster.master_url,
                "--bootstrap-servers": kafka_bootstrap,
                "--checkpoint-dir": (tmp_path / "checkpoint").as_uri(),
            },
        )
        command[0] = str(SPARK_HOME / "bin" / "spark-submit")
        command += ["--source-topic", source, "--target-topic", target]
        command += ["--dead-letter-topic", dead]
        result = subprocess.run(
            command,
            check=False,
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=SUBMIT_TIMEOUT_S,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        # The driver tells the master it finished on its way out: not always before
        # spark-submit exits on a busy machine.
        eventually(lambda: bool(_finished_apps(cluster.state())), 60, cluster.state, 0.5)
        finished = _finished_apps(cluster.state())

    assert len(finished) == 1, finished
    executor_logs = list(cluster.work_dir.glob(f"{finished[0]['id']}/*/stderr"))
    assert executor_logs, "no executor ran on the worker"
    assert any("Finished task" in log.read_text() for log in executor_logs)

    expected = ExpectedOrders().run(records)
    output = compacted(read_topic(kafka_bootstrap, target))
    assert {key: orjson.loads(value) for key, value in output.items()} == expected.active()
    assert len(read_topic(kafka_bootstrap, dead)) == sum(r.bad_reason is not None for r in records)


def _finished_apps(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [app for app in state["completedapps"] if app["state"] == "FINISHED"]
