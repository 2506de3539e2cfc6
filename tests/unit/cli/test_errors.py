"""A command's error line names the command's options where the library's message names
its keyword arguments."""

from __future__ import annotations

from globalstore.cli.errors import explain
from globalstore.codec import require_compacted
from globalstore.errors import TopicNotCompacted


def test_the_not_compacted_error_names_the_flag() -> None:
    try:
        require_compacted("orders", "delete", "or pass allow_uncompacted=True")
    except TopicNotCompacted as exc:
        assert "allow_uncompacted=True" in str(exc)  # in Python: the keyword
        line = explain(exc).message
    assert line.endswith("or pass --allow-uncompacted.") and "allow_uncompacted" not in line
