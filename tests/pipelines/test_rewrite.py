"""The topic rewrite job on real Spark and Kafka: X.v1 -> X.v2 through a converter, read by a
store that only knows the new format; a converter that raises writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from globalstore import GlobalStore
from pipelines.rewrite import RewriteRefused, rewrite
from tests.integration.store_support import produce
from tests.value_formats import v1_to_v2, v2_to_v3


def test_a_topic_is_rewritten_into_the_new_format(
    spark: SparkSession, kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    source, target = make_topic(partitions=2), make_topic(partitions=2)
    produce(kafka_bootstrap, source, [(f"k{i:03d}", {"i": i}) for i in range(40)])
    produce(kafka_bootstrap, source, [("k005", {"i": 500}), ("k006", None)])  # latest wins
    assert rewrite(spark, kafka_bootstrap, source, target, v1_to_v2, 2) == 40
    # A store reading format 2 with no converters: a format 1 value would be refused.
    with GlobalStore(target, kafka_bootstrap, tmp_path / "v2", value_format=2) as store:
        expected = {f"k{i:03d}": {"id": i, "v": 2} for i in range(40) if i != 6}
        expected["k005"] = {"id": 500, "v": 2}
        assert dict(store.items()) == expected


def test_a_failing_converter_writes_nothing_and_names_the_records(
    spark: SparkSession, kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    source, target = make_topic(partitions=1), make_topic(partitions=1)
    produce(kafka_bootstrap, source, [(f"k{i:03d}", {"id": i, "v": 2}) for i in range(20)])
    with pytest.raises(RewriteRefused, match=r"failed on 1 records.*k013.*offset 13"):
        rewrite(spark, kafka_bootstrap, source, target, v2_to_v3, 3)
    with GlobalStore(target, kafka_bootstrap, tmp_path / "v3") as store:
        assert store.count() == 0
