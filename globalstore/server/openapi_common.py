"""The pieces of the OpenAPI document (openapi.py) that several routes share: schemas,
query parameters and error answers."""

from __future__ import annotations

from typing import Any

from globalstore.server.settings import ServerSettings

__all__ = [
    "AS_OF_PARAMS",
    "ERROR",
    "INVALID",
    "POSITION",
    "QUARANTINED",
    "QUERY_ERRORS",
    "RANGE_PARAMS",
    "RETRY_AFTER",
    "UNAVAILABLE",
    "WAIT_PARAMS",
    "json_content",
    "page_params",
    "query_param",
    "stream_errors",
]

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
POSITION = {
    "type": "object",
    "description": "{partition: next offset applied}",
    "additionalProperties": {"type": "integer", "minimum": 0},
}
INVALID: dict[str, Any] = {
    "type": "object",
    "description": "A stored value that does not decode (not JSON, an unknown value format, "
    "or a converter raised on it): left out of the items, reported with its record. "
    "Fetching its key answers 500 with the same reason.",
    "required": ["key", "partition", "offset", "reason"],
    "properties": {
        "key": {"type": "string"},
        "partition": {"type": "integer", "description": "-1 for a value of the legacy layout"},
        "offset": {"type": "integer", "description": "-1 for a value of the legacy layout"},
        "reason": {"type": "string"},
    },
}
QUARANTINED = {
    "type": "object",
    "required": ["quarantined", "cursor"],
    "properties": {
        "quarantined": {
            "type": "array",
            "items": {
                **INVALID,
                "description": "A record the store did not apply; its timestamp (ms), the "
                "first bytes of its value as text (value_cut: more were held) and the "
                "value's length in bytes",
                "properties": {
                    **INVALID["properties"],
                    "timestamp": {"type": "integer"},
                    "value": {"type": "string"},
                    "value_bytes": {"type": "integer", "minimum": 0},
                    "value_cut": {"type": "boolean"},
                },
            },
        },
        "cursor": {"type": ["string", "null"], "description": "The next page; null: none"},
    },
}
UNAVAILABLE = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "state": {"type": "string"},
        "position": POSITION,
        "min_position": POSITION,
    },
}


def json_content(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """An answer described by `description` whose JSON body follows `schema`."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def query_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    """An optional query parameter: a string unless `schema` says otherwise."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string", **schema},
    }


def page_params(settings: ServerSettings) -> list[dict[str, Any]]:
    """The parameters of a paged route: how many items a page holds, where it continues."""
    return [
        query_param(
            "limit",
            f"Items per page (default {settings.default_limit}).",
            type="integer",
            minimum=1,
            maximum=settings.max_limit,
        ),
        query_param("cursor", "The cursor of the previous page."),
    ]


WAIT_PARAMS = [
    query_param(
        "min_position",
        "Wait until the store has applied at least these offsets: `0:12,1:7` or JSON "
        '`{"0": 12, "1": 7}` (as /v1/status returns the position). 503 if not reached in time.',
    ),
    query_param(
        "wait",
        "Seconds the request may wait before its answer starts: for min_position and, on "
        "export and snapshot, for a free stream slot (default and maximum: the server's "
        "max wait).",
        type="number",
        minimum=0,
    ),
]
AS_OF_PARAMS = [
    query_param(
        "as_of",
        "Answer as of this time: RFC 3339 with a time zone (`2026-11-29T09:00:00Z`) or epoch "
        "seconds. Needs a store with history; a time older than the oldest it can answer "
        "(/v1/status `history.oldest`) is a 400 naming that time.",
    ),
]
RANGE_PARAMS = [
    query_param("prefix", "Only keys starting with this."),
    query_param("start", "First key (inclusive)."),
    query_param("end", "Key to stop before (exclusive)."),
]
RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
}
QUERY_ERRORS = {
    "400": json_content(ERROR, "A malformed parameter; the message names it."),
    "401": json_content(ERROR, "Missing or wrong bearer token (when the server has one)."),
    "503": {
        **json_content(UNAVAILABLE, "Not restored yet, or min_position not reached in time."),
        "headers": RETRY_AFTER,
    },
}


def stream_errors(route: str, limit: int) -> dict[str, Any]:
    """The error answers of a streaming route, at most `limit` of whose streams run at once."""
    busy = {
        **json_content(
            UNAVAILABLE,
            f"Not restored yet, min_position not reached in time, or {limit} {route} streams "
            "already running and none ended within `wait`.",
        ),
        "headers": RETRY_AFTER,
    }
    return {**QUERY_ERRORS, "503": busy}
