"""The session the pipelines run in: what it sets for pandas 3 (docs/pipelines.md)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.utils import require_minimum_pandas_version

from pipelines.session import build_session

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
