"""The state helpers' pure parts (no Spark)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.pandas_state import member_of


@pytest.mark.parametrize("dtype", ["str", "object"])
def test_member_of_answers_like_a_set_for_both_string_dtypes(dtype: str) -> None:
    values = pd.Series(["o-1", "o-2", "o-3", "o-2", "ø-4", ""], dtype=dtype)
    among = pd.Series(["o-2", "ø-4", "o-9", "o-2"], dtype="str")
    expected = [value in set(among) for value in values]
    assert member_of(values, among).tolist() == expected
    assert member_of(values, among.to_numpy(dtype=object)).tolist() == expected


def test_member_of_nothing_or_in_nothing_is_all_false() -> None:
    assert member_of(
        pd.Series(["o-1", "o-2"], dtype="str"), pd.Series([], dtype="str")
    ).tolist() == [
        False,
        False,
    ]
    result = member_of(pd.Series([], dtype="str"), np.array(["o-1"], dtype=object))
    assert result.dtype == np.bool_ and len(result) == 0


def test_member_of_takes_arrow_columns_of_several_chunks() -> None:
    values = pa.chunked_array([["o-1", "o-2"], ["o-3"]])
    among = pa.chunked_array([["o-3"], [], ["o-1"]])
    assert member_of(values, among).tolist() == [True, False, True]
