"""The HTTP API of a served store (the optional `serve` extra): queries, probes, metrics,
snapshots. `globalstore serve` runs it; create_app() embeds it in another ASGI server."""

from globalstore.server.app import create_app
from globalstore.server.changes import end_changes_on_exit_signals
from globalstore.server.guard import load_token
from globalstore.server.run import DEFAULT_HOST, DEFAULT_PORT, listen, server
from globalstore.server.served import RestoreProgress, ServedStore
from globalstore.server.settings import ServerSettings, binds_every_interface, hosts_for

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "RestoreProgress",
    "ServedStore",
    "ServerSettings",
    "binds_every_interface",
    "create_app",
    "end_changes_on_exit_signals",
    "hosts_for",
    "listen",
    "load_token",
    "server",
]
