"""The session the pipelines run in: what it sets for pandas 3, and the connectors it
resolves (docs/pipelines.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.utils import require_minimum_pandas_version

import pipelines
from pipelines.orders.avro_events import SCHEMA_TEXT
from pipelines.orders.generator import StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.session import AVRO_CONNECTOR, build_session
from tests.pipelines.kafka_read import compacted_json

pytestmark = pytest.mark.spark


def _pandas_warnings() -> int:
    """How many warnings PySpark's pandas check gives here, under the filters in force."""
    with warnings.catch_warnings(record=True) as seen:
        require_minimum_pandas_version()
    return len(seen)


def test_pandas_3_is_what_runs_and_pysparks_warning_about_it_is_silenced(
    spark: SparkSession,
) -> None:
    assert int(pd.__version__.split(".")[0]) == 3
    # pytest gives each test the warning filters it started with, so the filter the fixture's
    # build_session set is gone by now: build (get) the session again, as a job does.
    assert build_session(master="local[2]", shuffle_partitions=2) is spark
    assert _pandas_warnings() == 0  # the driver

    def in_a_worker(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            yield frame.assign(warned=_pandas_warnings(), major=int(pd.__version__[0]))

    rows = (
        spark.range(4, numPartitions=2)
        .mapInPandas(in_a_worker, "id long, warned long, major long")
        .collect()
    )
    assert len(rows) == 4
    assert {(r.warned, r.major) for r in rows} == {(0, 3)}  # every Python worker


# The JVM of a session started here resolves its packages from Maven Central unless they are
# in the Ivy cache: a proxy nobody listens on makes any download fail, i.e. offline.
OFFLINE = " ".join(f"-D{scheme}.proxy{key}" for scheme in ("http", "https")
                   for key in ("Host=127.0.0.1", "Port=9"))  # fmt: skip

# Two runs in one process, as one script or the demo may do: JSON, then Avro on the same
# (shared) session. The second is the spark-submit entry's: its error is one line, status 2.
TWO_RUNS = """
import json, sys
from pipelines.cli import run
json_run, avro_run = json.loads(sys.argv[1])
run.main(json_run, standalone_mode=False)
run.main(avro_run)
"""


def _json_cache(ivy: Path) -> Path:
    """A fresh Ivy directory whose cache holds what the session fixture resolved, spark-avro
    taken out: a cache filled for JSON runs."""
    filled = Path.home() / ".ivy2.5.2" / "cache"  # Spark 4's default spark.jars.ivy
    shutil.copytree(filled, ivy / "cache", ignore=shutil.ignore_patterns("spark-avro*"))
    return ivy


def _offline(ivy: Path) -> dict[str, str]:
    """A child's environment: offline, the Ivy directory `ivy`, and the code under test (not
    whatever copy of the project the interpreter would import from elsewhere)."""
    return {
        **os.environ,
        "PYTHONPATH": str(Path(pipelines.__file__).parents[1]),
        "SPARK_SUBMIT_OPTS": OFFLINE,
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.jars.ivy={ivy} pyspark-shell",
    }


def test_a_json_run_works_offline_without_the_avro_connector_and_refuses_avro_after(
    spark: SparkSession,  # its start fills the Ivy cache this test copies
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    ivy = _json_cache(tmp_path / "ivy")
    source = make_topic(partitions=2, compact=False, prefix="offline-raw")
    events = generate(StreamShape(orders=40, bad_every=20), seed=3)
    produce(kafka_bootstrap, source, events)
    suffix = uuid.uuid4().hex[:8]
    target, dead_letter = f"offline-current-{suffix}", f"offline-dlq-{suffix}"
    (tmp_path / "orders.avsc").write_text(SCHEMA_TEXT)

    def argv(name: str, *extra: str) -> list[str]:
        return ["orders", "--bootstrap-servers", kafka_bootstrap, "--source-topic", source,
                "--target-topic", target, "--dead-letter-topic", dead_letter, "--master",
                "local[1]", "--checkpoint-dir", str(tmp_path / name), *extra]  # fmt: skip

    runs = json.dumps([argv("json"), argv("avro", "--avro-schema", "orders.avsc")])
    ran = subprocess.run(
        [sys.executable, "-c", TWO_RUNS, runs],
        cwd=tmp_path, env=_offline(ivy), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    log = tmp_path / ".globalstore" / "logs" / "spark.log"
    assert "orders: batches=" in ran.stdout, (ran.stdout, ran.stderr, log.read_text()[-3000:])
    assert compacted_json(kafka_bootstrap, target) == ExpectedOrders().run(events).active()
    assert not list((ivy / "jars").glob("*spark-avro*"))
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip().splitlines()[-1] == (
        f"error: an Avro run needs Spark's Avro connector ({AVRO_CONNECTOR}), and the "
        "SparkSession of this process was started without it (packages are fixed when a "
        "session starts): run it in a new process, build the session with "
        "build_session(avro=True) before any run, or under spark-submit add it to --packages"
    )


def test_offline_is_offline_an_avro_run_cannot_resolve_its_connector(
    spark: SparkSession, kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The control for the test above: with the same cache and settings, what is not in the
    cache cannot be had. So the JSON run worked because it asked for no spark-avro."""
    ivy = _json_cache(tmp_path / "ivy")
    source = make_topic(partitions=1, compact=False, prefix="offline-avro-raw")
    (tmp_path / "orders.avsc").write_text(SCHEMA_TEXT)
    ran = subprocess.run(
        [sys.executable, "-m", "pipelines", "orders", "--bootstrap-servers", kafka_bootstrap,
         "--source-topic", source, "--avro-schema", "orders.avsc", "--master", "local[1]"],
        cwd=tmp_path, env=_offline(ivy), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ran.returncode != 0
    log = (tmp_path / ".globalstore" / "logs" / "spark.log").read_text()
    assert "unresolved dependency: org.apache.spark#spark-avro_2.13" in log, log[-3000:]
