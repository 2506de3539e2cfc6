"""The OpenAPI 3.0 document of the HTTP API, served at /openapi.json (a stable path)."""

from __future__ import annotations

from typing import Any

from globalstore.server.bodies import QUARANTINE_VALUE_BYTES
from globalstore.server.openapi_common import (
    AS_OF_PARAMS,
    ERROR,
    INVALID,
    POSITION,
    QUARANTINED,
    QUERY_ERRORS,
    RANGE_PARAMS,
    RETRY_AFTER,
    UNAVAILABLE,
    WAIT_PARAMS,
    json_content,
    page_params,
    query_param,
    stream_errors,
)
from globalstore.server.settings import ServerSettings

__all__ = ["PATH", "document"]

# One server-sent event as a client parses it: its type (start, change, resync), its data
# (a JSON object, as text) and, for a change, its id (partition:offset).
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["start", "change", "resync"]},
        "data": {"type": "string"},
        "id": {"type": "string"},
    },
    "required": ["event", "data"],
}

PATH = "/openapi.json"


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
                "items": INVALID,
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
        **INVALID,
        "required": [*INVALID["required"], "index_value"],
        "properties": {
            **INVALID["properties"],
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
                        *AS_OF_PARAMS,
                        *WAIT_PARAMS,
                    ],
                    "responses": {
                        "200": json_content(entry, "The value with the record it came from"),
                        "404": json_content(ERROR, "No such key"),
                        **QUERY_ERRORS,
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
                        *RANGE_PARAMS,
                        *page_params(settings),
                        *AS_OF_PARAMS,
                        *WAIT_PARAMS,
                    ],
                    "responses": {"200": json_content(page, "A page"), **QUERY_ERRORS},
                }
            },
            "/v1/indexes/{name}": {
                "get": {
                    "summary": "One page of the keys a secondary index finds, with their values",
                    "description": "With `value`: the keys of that index value, in key order. "
                    "Else the keys of the index values starting with `prefix` and/or in "
                    "[`start`, `end`), in index value order, then key order. Index and values "
                    "are read over one point-in-time view. With `as_of`, the keys whose value "
                    "then the index maps to those values, with that value: every key's value "
                    "then is indexed (the cost of an export as of that time). "
                    f"Pages as /v1/keys (about "
                    f"{settings.max_page_bytes} bytes at most).",
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "description": "The index, as named in the store's indexes",
                            "schema": {"type": "string", "minLength": 1},
                        },
                        query_param("value", "Only keys of exactly this index value."),
                        query_param("prefix", "Only index values starting with this."),
                        query_param("start", "First index value (inclusive)."),
                        query_param("end", "Index value to stop before (exclusive)."),
                        *page_params(settings),
                        *AS_OF_PARAMS,
                        *WAIT_PARAMS,
                    ],
                    "responses": {
                        "200": json_content(match_page, "A page"),
                        "404": json_content(ERROR, "The store has no index of that name"),
                        **QUERY_ERRORS,
                        "503": {
                            **json_content(
                                UNAVAILABLE,
                                "Not restored yet, min_position not reached in time, or the "
                                "index is still being built (/v1/status shows its progress).",
                            ),
                            "headers": RETRY_AFTER,
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
                    "parameters": [*RANGE_PARAMS, *AS_OF_PARAMS, *WAIT_PARAMS],
                    "responses": {
                        "200": {
                            "description": "NDJSON stream",
                            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                        },
                        **stream_errors("export", settings.max_exports),
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
                    "parameters": [RANGE_PARAMS[0], *WAIT_PARAMS],
                    "responses": {
                        "200": {
                            "description": "text/event-stream",
                            "content": {"text/event-stream": {"schema": _SSE_EVENT}},
                        },
                        "501": json_content(ERROR, "This store has no change feed."),
                        **stream_errors("changes", settings.max_exports),
                    },
                }
            },
            "/v1/count": {
                "get": {
                    "summary": "Number of live keys",
                    "parameters": list(WAIT_PARAMS),
                    "responses": {
                        "200": json_content(
                            {
                                "type": "object",
                                "required": ["count"],
                                "properties": {"count": {"type": "integer"}},
                            },
                            "The count",
                        ),
                        **QUERY_ERRORS,
                    },
                }
            },
            "/v1/quarantine": {
                "get": {
                    "summary": "One page of the records not applied: their value does not "
                    "decode (the store's invalid_values='quarantine'), by key",
                    "description": f"Pages as /v1/keys (`limit`, `cursor`, about "
                    f"{settings.max_page_bytes} bytes at most); each value is cut to its "
                    f"first {QUARANTINE_VALUE_BYTES} bytes.",
                    "parameters": page_params(settings),
                    "responses": {
                        "200": json_content(QUARANTINED, "Empty without one"),
                        **QUERY_ERRORS,
                    },
                }
            },
            "/v1/status": {
                "get": {
                    "summary": "State, position and lag per partition, key count, layout, restore",
                    "responses": {
                        "200": json_content(
                            {
                                "type": "object",
                                "required": ["ready", "position", "restore"],
                                "properties": {
                                    "ready": {"type": "boolean"},
                                    "position": POSITION,
                                    "lag": POSITION,
                                    "restore": {"type": "object"},
                                },
                            },
                            "The store's status",
                        ),
                        "401": QUERY_ERRORS["401"],
                    },
                }
            },
            "/v1/snapshot": {
                "get": {
                    "summary": "A consistent RocksDB checkpoint of the store as a tar stream",
                    "parameters": list(WAIT_PARAMS),
                    "responses": {
                        "200": {
                            "description": "tar of db/...",
                            "content": {
                                "application/x-tar": {
                                    "schema": {"type": "string", "format": "binary"}
                                }
                            },
                        },
                        **stream_errors("snapshot", settings.max_snapshots),
                        "409": json_content(
                            ERROR,
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
                    "responses": {
                        "200": json_content(probe, "Alive"),
                        "503": json_content(ERROR, "Failed"),
                    },
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Ready: restored to the end offsets seen at start, and following",
                    "security": [],
                    "responses": {
                        "200": json_content(probe, "Ready"),
                        "503": json_content(probe, "Not ready"),
                    },
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
                        "401": QUERY_ERRORS["401"],
                    },
                }
            },
        },
    }
    if settings.token is not None:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
        doc["security"] = [{"bearer": []}]
    return doc
