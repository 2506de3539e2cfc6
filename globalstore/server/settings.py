"""Limits and protection of the HTTP API (the bind address is the runner's business)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSettings:
    """Every bound a client can meet: waits, page sizes, streams in flight."""

    token: str | None = None
    max_wait: float = 10.0  # seconds a request may wait: for min_position, then for a slot
    default_limit: int = 100
    max_limit: int = 1000  # hard bound on a page, in items
    max_page_bytes: int = 4 << 20  # and in bytes of JSON (one item always fits, however big)
    export_chunk: int = 1000  # items per streamed chunk of /v1/export
    max_waiting: int = 100  # min_position waits in flight at once (each holds a thread)
    max_exports: int = 8  # /v1/export streams at once (each holds a RocksDB view)
    max_snapshots: int = 2  # /v1/snapshot streams at once (each a flush and a checkpoint)
    idle_timeout: float = 30.0  # seconds a stream waits on a client that stopped reading
