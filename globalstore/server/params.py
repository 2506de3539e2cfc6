"""Query parameters of the HTTP API: parsed and bounded here, so a malformed one is a 400 with
a message naming it, never a 500 further in."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from globalstore.read.as_of import parse as parse_time
from globalstore.read.protocols import AsOf

__all__ = [
    "BadRequest",
    "Range",
    "as_of",
    "cursor",
    "encode_cursor",
    "encode_match_cursor",
    "integer",
    "key_range",
    "match_cursor",
    "min_position",
    "seconds",
    "text",
]


class BadRequest(Exception):  # noqa: N818 - reads as the HTTP status it becomes
    """A parameter is malformed or out of bounds (HTTP 400)."""


@dataclass(frozen=True)
class Range:
    """Which keys a list or export covers: a prefix and/or [start, end)."""

    prefix: str | None
    start: str | None
    end: str | None


def text(params: Mapping[str, str], name: str, max_bytes: int = 4096) -> str | None:
    """An optional string parameter, valid UTF-8 and at most `max_bytes` long."""
    value = params.get(name)
    if value is None:
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest(f"{name} is not valid UTF-8") from None
    if size > max_bytes:
        raise BadRequest(f"{name} is longer than {max_bytes} bytes")
    return value


def key_range(params: Mapping[str, str]) -> Range:
    """The prefix, start and end query parameters as a Range."""
    return Range(text(params, "prefix"), text(params, "start"), text(params, "end"))


def integer(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """Query parameter `name` as an int in [low, high], `default` when absent."""
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


def seconds(params: Mapping[str, str], name: str, default: float, high: float) -> float:
    """Query parameter `name` as seconds in [0, high], `default` when absent."""
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a number of seconds, got {raw[:40]!r}") from None
    if not math.isfinite(value) or not 0 <= value <= high:
        raise BadRequest(f"{name} must be between 0 and {high} seconds, got {raw[:40]!r}")
    return value


def as_of(params: Mapping[str, str]) -> AsOf | None:
    """The `as_of` parameter: RFC 3339 with a time zone (2026-11-29T09:00:00Z) or epoch
    seconds; None when absent (now)."""
    raw = params.get("as_of")
    if raw is None:
        return None
    try:
        return parse_time(raw)
    except ValueError as exc:
        raise BadRequest(f"as_of: {exc}") from None


def encode_cursor(key: str) -> str:
    """The cursor for the page after `key`: the key itself, base64url without padding."""
    return base64.urlsafe_b64encode(key.encode("utf-8")).rstrip(b"=").decode("ascii")


def cursor(params: Mapping[str, str]) -> str | None:
    """The last key of the previous page, from its cursor."""
    raw = params.get("cursor")
    if raw is None:
        return None
    try:
        padded = raw.encode("ascii") + b"=" * (-len(raw) % 4)
        return base64.urlsafe_b64decode(padded).decode("utf-8")
    except (UnicodeError, binascii.Error, ValueError):
        raise BadRequest("cursor is not one this server returned") from None


def encode_match_cursor(index_value: str, key: str) -> str:
    """The cursor for the page after an index match: its (index value, key), base64url of
    their JSON pair without padding."""
    raw = orjson.dumps([index_value, key])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def match_cursor(params: Mapping[str, str]) -> tuple[str, str] | None:
    """(index value, key) of the last match of the previous page, from its cursor."""
    raw = params.get("cursor")
    if raw is None:
        return None
    try:
        padded = raw.encode("ascii") + b"=" * (-len(raw) % 4)
        pair = orjson.loads(base64.urlsafe_b64decode(padded))
    except (UnicodeError, binascii.Error, ValueError):
        raise BadRequest("cursor is not one this server returned") from None
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
        raise BadRequest("cursor is not one this server returned")
    return pair[0], pair[1]


_MAX_PARTITION = 1 << 20
_MAX_OFFSET = (1 << 63) - 1


def min_position(params: Mapping[str, str]) -> dict[int, int] | None:
    """{partition: offset} from `{"0": 12, "1": 7}` (JSON, as status returns it) or `0:12,1:7`."""
    raw = params.get("min_position")
    if raw is None:
        return None
    pairs: list[tuple[object, object]]
    if raw.lstrip().startswith("{"):
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadRequest("min_position is not valid JSON") from None
        if not isinstance(parsed, dict):
            raise BadRequest("min_position must be a JSON object {partition: offset}")
        pairs = list(parsed.items())
    else:
        pairs = []
        for item in raw.split(","):
            if item.strip():
                left, _, right = item.partition(":")
                pairs.append((left, right))
    out: dict[int, int] = {}
    for raw_partition, raw_offset in pairs:
        partition = _bounded_int(raw_partition, _MAX_PARTITION, "partition")
        offset = _bounded_int(raw_offset, _MAX_OFFSET, "offset")
        out[partition] = max(out.get(partition, 0), offset)
    return out


def _bounded_int(value: object, high: int, what: str) -> int:
    if isinstance(value, bool):
        raise BadRequest(f"min_position: {what} {value!r} is not an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise BadRequest(
            f"min_position: {what} {str(value)[:40]!r} is not an integer (use 0:12,1:7 or JSON)"
        )
    if not 0 <= number <= high:
        raise BadRequest(f"min_position: {what} {number} is out of range")
    return number
