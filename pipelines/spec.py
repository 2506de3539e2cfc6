"""What a pipeline author writes: the fields to validate and the transform."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame

DEFAULT_MAX_RECORD_BYTES = 16 * 1024
"""Raw records larger than this are dead-lettered unparsed (a sane event is ~200 bytes)."""


class Kind(enum.Enum):
    """JSON type a raw field must have, and the Spark type it is converted to."""

    STRING = "string"
    NUMBER = "double"
    TIMESTAMP = "timestamp"  # ISO-8601 text (2026-01-02T03:04:05.678Z) or epoch milliseconds


@dataclass(frozen=True)
class Rule:
    """A check on a typed, present field; `reason` is written to the dead-letter record."""

    check: Callable[[Column], Column]
    reason: str


@dataclass(frozen=True)
class Field:
    """A raw event's field: its name, its kind and the rules its value must pass."""

    name: str
    kind: Kind
    rules: tuple[Rule, ...] = ()


Transform = Callable[[DataFrame], DataFrame]
"""Clean typed rows in; rows of (key: string, value: struct or null for delete) out."""


@dataclass(frozen=True)
class Pipeline:
    """A job: the raw fields it validates, the transform it runs, and its three topics."""

    name: str
    fields: tuple[Field, ...]
    transform: Transform
    source_topic: str
    target_topic: str
    dead_letter_topic: str
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    version: int = 1
    """Recorded in the checkpoint, which a run of another version refuses: raise it when a
    change makes old checkpoints unusable (the state's layout, the bucket count)."""
