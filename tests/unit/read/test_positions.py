"""The positions a caller waits for: partitions as ints or strings of digits (the keys
/v1/status answers with, once parsed from JSON), and only partitions the topic has."""

from __future__ import annotations

from typing import Any

import pytest

from globalstore.read.protocols import check_partitions, partition_offsets


def test_partitions_as_ints_or_strings_of_digits() -> None:
    assert partition_offsets({0: 5, 2: 7}) == {0: 5, 2: 7}
    assert partition_offsets({"0": 5, "12": 7}) == {0: 5, 12: 7}


@pytest.mark.parametrize("partition", ["two", "-1", "", "1.0", True, 1.0, None, "²"])
def test_any_other_partition_is_a_value_error(partition: Any) -> None:
    with pytest.raises(ValueError, match="partitions by number"):
        partition_offsets({partition: 1})


def test_a_partition_the_topic_does_not_have_is_a_value_error() -> None:
    check_partitions({0: 1, 2: 3}, {0, 1, 2}, "orders")
    with pytest.raises(ValueError, match=r"topic 'orders' has no partition 3 \(it has 0, 1, 2\)"):
        check_partitions({0: 1, 3: 3}, {0, 1, 2}, "orders")
    check_partitions({7: 1}, set(), "orders")  # not known yet: not judged
