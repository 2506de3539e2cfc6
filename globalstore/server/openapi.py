"""The OpenAPI 3.0 document of the HTTP API, served at /openapi.json (a stable path)."""

from __future__ import annotations

from typing import Any

from globalstore.server.settings import ServerSettings

__all__ = ["PATH", "document"]

PATH = "/openapi.json"

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
_POSITION = {
    "type": "object",
    "description": "{partition: next offset applied}",
    "additionalProperties": {"type": "integer", "minimum": 0},
}
_INVALID: dict[str, Any] = {
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
_QUARANTINED = {
    "type": "object",
    "required": ["quarantined"],
    "properties": {
        "quarantined": {
            "type": "array",
            "items": {
                **_INVALID,
                "description": "A record the store did not apply; its timestamp (ms) and value",
                "properties": {**_INVALID["properties"], "timestamp": {}, "value": {}},
            },
        }
    },
}
_UNAVAILABLE = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "state": {"type": "string"},
        "position": _POSITION,
        "min_position": _POSITION,
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _query(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string", **schema},
    }


def _page_params(settings: ServerSettings) -> list[dict[str, Any]]:
    """The parameters of a paged route: how many items a page holds, where it continues."""
    return [
        _query(
            "limit",
            f"Items per page (default {settings.default_limit}).",
            type="integer",
            minimum=1,
            maximum=settings.max_limit,
        ),
        _query("cursor", "The cursor of the previous page."),
    ]


_WAIT_PARAMS = [
    _query(
        "min_position",
        "Wait until the store has applied at least these offsets: `0:12,1:7` or JSON "
        '`{"0": 12, "1": 7}` (as /v1/status returns the position). 503 if not reached in time.',
    ),
    _query(
        "wait",
        "Seconds the request may wait before its answer starts: for min_position and, on "
        "export and snapshot, for a free stream slot (default and maximum: the server's "
        "max wait).",
        type="number",
        minimum=0,
    ),
]
_RANGE_PARAMS = [
    _query("prefix", "Only keys starting with this."),
    _query("start", "First key (inclusive)."),
    _query("end", "Key to stop before (exclusive)."),
]
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
}
_QUERY_ERRORS = {
    "400": _json(_ERROR, "A malformed parameter; the message names it."),
    "401": _json(_ERROR, "Missing or wrong bearer token (when the server has one)."),
    "503": {
        **_json(_UNAVAILABLE, "Not restored yet, or min_position not reached in time."),
        "headers": _RETRY_AFTER,
    },
}


def _stream_errors(route: str, limit: int) -> dict[str, Any]:
    busy = {
        **_json(
            _UNAVAILABLE,
            f"Not restored yet, min_position not reached in time, or {limit} {route} streams "
            "already running and none ended within `wait`.",
        ),
        "headers": _RETRY_AFTER,
    }
    return {**_QUERY_ERRORS, "503": busy}


def document(settings: ServerSettings) -> dict[str, Any]:
    """The OpenAPI document of the API `settings` serve."""
    item = {
        "type": "object",
        "required": ["key", "value"],
        "properties": {"key": {"type": "string"}, "value": {}},
    }
    entry = {
        "type": "object",
        "required": ["key", "value", "timestamp", "partition", "offset"],
        "properties": {
            "key": {"type": "string"},
            "value": {"description": "The JSON value as the topic holds it"},
            "timestamp": {"type": "integer", "description": "Kafka record timestamp (ms)"},
            "partition": {"type": "integer"},
            "offset": {"type": "integer"},
        },
    }
    page = {
        "type": "object",
        "required": ["items", "invalid", "cursor"],
        "properties": {
            "items": {"type": "array", "items": item},
            "invalid": {
                "type": "array",
                "items": _INVALID,
                "description": "The keys of the page's range whose values do not decode, in "
                "key order (usually empty).",
            },
            "cursor": {
                "type": "string",
                "nullable": True,
                "description": "Pass as `cursor` for the next page (it continues past both "
                "items and invalid entries); null on the last.",
            },
        },
    }
    match = {
        "type": "object",
        "required": ["key", "value", "index_value"],
        "properties": {
            "key": {"type": "string"},
            "value": {},
            "index_value": {"type": "string", "description": "The index value it was found by"},
        },
    }
    invalid_match = {
        **_INVALID,
        "required": [*_INVALID["required"], "index_value"],
        "properties": {
            **_INVALID["properties"],
            "index_value": {"type": "string", "description": "The index value it was found by"},
        },
    }
    match_page = {
        "type": "object",
        "required": ["items", "invalid", "cursor"],
        "properties": {
            "items": {"type": "array", "items": match},
            "invalid": {"type": "array", "items": invalid_match},
            "cursor": page["properties"]["cursor"],  # type: ignore[index]
        },
    }
    probe = {"type": "object", "properties": {"status": {"type": "string"}}}
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": "globalstore",
            "version": "1",
            "description": "Queries on a complete local copy of a compacted Kafka topic.",
        },
        "paths": {
            "/v1/keys/{key}": {
                "get": {
                    "summary": "Value and record timestamp of one key",
                    "parameters": [
                        {
                            "name": "key",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1},
                        },
                        *_WAIT_PARAMS,
                    ],
                    "responses": {
                        "200": _json(entry, "The value with the record it came from"),
                        "404": _json(_ERROR, "No such key"),
                        **_QUERY_ERRORS,
                    },
                }
            },
            "/v1/keys": {
                "get": {
                    "summary": "One page of keys and values in key order",
                    "description": f"A page stops at `limit` entries (items and invalid "
                    f"ones together) or at about {settings.max_page_bytes} bytes of them, "
                    "whichever comes first (one always fits); `cursor` continues where it "
                    "stopped. A value that does not decode never fails the page: its key is "
                    "listed under `invalid` and counted in globalstore_decode_errors_total.",
                    "parameters": [
                        *_RANGE_PARAMS,
                        *_page_params(settings),
                        *_WAIT_PARAMS,
                    ],
                    "responses": {"200": _json(page, "A page"), **_QUERY_ERRORS},
                }
            },
            "/v1/indexes/{name}": {
                "get": {
                    "summary": "One page of the keys a secondary index finds, with their values",
                    "description": "With `value`: the keys of that index value, in key order. "
                    "Else the keys of the index values starting with `prefix` and/or in "
                    "[`start`, `end`), in index value order, then key order. Index and values "
                    f"are read over one point-in-time view. Pages as /v1/keys (about "
                    f"{settings.max_page_bytes} bytes at most).",
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "description": "The index, as named in the store's indexes",
                            "schema": {"type": "string", "minLength": 1},
                        },
                        _query("value", "Only keys of exactly this index value."),
                        _query("prefix", "Only index values starting with this."),
                        _query("start", "First index value (inclusive)."),
                        _query("end", "Index value to stop before (exclusive)."),
                        *_page_params(settings),
                        *_WAIT_PARAMS,
                    ],
                    "responses": {
                        "200": _json(match_page, "A page"),
                        "404": _json(_ERROR, "The store has no index of that name"),
                        **_QUERY_ERRORS,
                        "503": {
                            **_json(
                                _UNAVAILABLE,
                                "Not restored yet, min_position not reached in time, or the "
                                "index is still being built (/v1/status shows its progress).",
                            ),
                            "headers": _RETRY_AFTER,
                        },
                    },
                }
            },
            "/v1/export": {
                "get": {
                    "summary": "Every item as NDJSON {key, value} lines, one point-in-time view",
                    "description": "A value that does not decode is left out: a line "
                    "{error, key, partition, offset, reason} stands in its place and the "
                    "stream goes on (each counted in globalstore_decode_errors_total). A line "
                    "with `error` alone ends a stream cut short (the store was closed).",
                    "parameters": [*_RANGE_PARAMS, *_WAIT_PARAMS],
                    "responses": {
                        "200": {
                            "description": "NDJSON stream",
                            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                        },
                        **_stream_errors("export", settings.max_exports),
                    },
                }
            },
            "/v1/changes": {
                "get": {
                    "summary": "Server-sent events: each change applied from now on",
                    "description": "`start` {position} first, then `change` {key, value "
                    "(null: deleted), partition, offset} (id partition:offset) in offset order "
                    "per partition. A client that reads too slowly gets one `resync` {reason}: "
                    "re-read what you care about; the changes after it are complete. A "
                    "comment line while idle; the stream ends when the store closes.",
                    "parameters": [_RANGE_PARAMS[0], *_WAIT_PARAMS],
                    "responses": {
                        "200": {
                            "description": "text/event-stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        "501": _json(_ERROR, "This store has no change feed."),
                        **_stream_errors("changes", settings.max_exports),
                    },
                }
            },
            "/v1/count": {
                "get": {
                    "summary": "Number of live keys",
                    "parameters": list(_WAIT_PARAMS),
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["count"],
                                "properties": {"count": {"type": "integer"}},
                            },
                            "The count",
                        ),
                        **_QUERY_ERRORS,
                    },
                }
            },
            "/v1/quarantine": {
                "get": {
                    "summary": "Records not applied: their value does not decode (the store's "
                    "invalid_values='quarantine'), by key",
                    "responses": {"200": _json(_QUARANTINED, "Empty without one"), **_QUERY_ERRORS},
                }
            },
            "/v1/status": {
                "get": {
                    "summary": "State, position and lag per partition, key count, layout, restore",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["ready", "position", "restore"],
                                "properties": {
                                    "ready": {"type": "boolean"},
                                    "position": _POSITION,
                                    "lag": _POSITION,
                                    "restore": {"type": "object"},
                                },
                            },
                            "The store's status",
                        ),
                        "401": _QUERY_ERRORS["401"],
                    },
                }
            },
            "/v1/snapshot": {
                "get": {
                    "summary": "A consistent RocksDB checkpoint of the store as a tar stream",
                    "parameters": list(_WAIT_PARAMS),
                    "responses": {
                        "200": {
                            "description": "tar of db/...",
                            "content": {
                                "application/x-tar": {
                                    "schema": {"type": "string", "format": "binary"}
                                }
                            },
                        },
                        **_stream_errors("snapshot", settings.max_snapshots),
                        "409": _json(
                            _ERROR,
                            "Served by worker processes (serve --workers), which cannot "
                            "checkpoint the store; the body says what to do instead.",
                        ),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": (
                        "Alive (503 once the store cannot follow: it could not start, or it "
                        "stopped on an error; the body names the error's type only)"
                    ),
                    "security": [],
                    "responses": {"200": _json(probe, "Alive"), "503": _json(_ERROR, "Failed")},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Ready: restored to the end offsets seen at start, and following",
                    "security": [],
                    "responses": {"200": _json(probe, "Ready"), "503": _json(probe, "Not ready")},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {
                        "200": {
                            "description": "Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": _QUERY_ERRORS["401"],
                    },
                }
            },
        },
    }
    if settings.token is not None:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
        doc["security"] = [{"bearer": []}]
    return doc
