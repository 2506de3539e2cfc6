"""Limits and protection of the HTTP API (the bind address is the runner's business)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LOCAL_HOSTS", "ServerSettings", "binds_every_interface", "hosts_for"]

LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")  # as a Host header names this machine
_EVERY_INTERFACE = frozenset({"0.0.0.0", "::", ""})


def binds_every_interface(bind: str) -> bool:
    """True for an address that binds every interface of the machine (0.0.0.0, ::)."""
    return bind in _EVERY_INTERFACE


def hosts_for(bind: str) -> tuple[str, ...]:
    """The Host headers a server bound to `bind` answers by default: the localhost names and
    `bind`; any ("*") when it binds every interface, where clients use names it cannot know."""
    if binds_every_interface(bind):
        return ("*",)
    return (*LOCAL_HOSTS, f"[{bind}]" if ":" in bind else bind)


@dataclass(frozen=True)
class ServerSettings:
    """Every bound a client can meet: waits, page sizes, streams in flight."""

    token: str | None = None
    # Host headers answered ("*" any, "*.example.com" a domain); others get 400, so a page
    # whose name was rebound to this address (DNS rebinding) cannot read the API.
    allowed_hosts: tuple[str, ...] = LOCAL_HOSTS
    max_wait: float = 10.0  # seconds a request may wait: for min_position, then for a slot
    default_limit: int = 100
    max_limit: int = 1000  # hard bound on a page, in items
    max_page_bytes: int = 4 << 20  # and in bytes of JSON (one item always fits, however big)
    export_chunk: int = 1000  # items per streamed chunk of /v1/export
    max_waiting: int = 100  # min_position waits in flight at once (each holds a thread)
    max_exports: int = 8  # /v1/export streams at once (each holds a RocksDB view)
    max_snapshots: int = 2  # /v1/snapshot streams at once (each a flush and a checkpoint)
    idle_timeout: float = 30.0  # seconds a stream waits on a client that stopped reading
    # False where the store is read, not written (serve --workers): /v1/snapshot answers 409.
    snapshots: bool = True
    keepalive: float = 15.0  # seconds between two comments of an idle /v1/changes stream
    max_change_streams: int = 8  # /v1/changes streams at once (each holds a thread)
    # The longest a /v1/changes stream lasts; its client reconnects (EventSource does by
    # itself). A client that never reads sends nothing that shows it, so this is its bound.
    change_stream_seconds: float = 900.0
    # Export the metrics through OpenTelemetry's global MeterProvider too (otel.py; the
    # `otel` extra). Requests are traced whenever the extra is installed.
    otel: bool = False
