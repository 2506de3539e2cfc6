"""`globalstore serve`: a store for one topic plus its HTTP API (needs the `serve` extra)."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import click

from globalstore.cli.errors import UserError
from globalstore.cli.target import StoreTarget, store_options
from globalstore.follow import progress

__all__ = ["check_exposure", "serve"]


def check_exposure(host: str, allowed_hosts: tuple[str, ...], *, has_token: bool) -> None:
    """Refuse to bind every interface with neither a token nor named Host headers: such a
    server answers anyone who reaches the machine, under any name (DNS rebinding included)."""
    from globalstore import server  # noqa: PLC0415 - the optional extra, only when serving

    if server.binds_every_interface(host) and not allowed_hosts and not has_token:
        raise UserError(
            f"--host {host} answers anyone who reaches this machine, under any name, and "
            "there is no token: give one (--token-file or $GLOBALSTORE_TOKEN), or name the "
            "hosts clients use (--allowed-host NAME; --allowed-host '*' to accept any)"
        )


@click.command()
@store_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="File holding the bearer token every route but the probes requires "
    "(default: $GLOBALSTORE_TOKEN; neither: no token).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST",
    help="A Host header the API answers (repeatable; *.example.com for a domain, * for any); "
    "others get 400. Default: localhost names and --host, any when --host binds every "
    "interface, which then needs a token or this option.",
)
@click.option(
    "--max-wait",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, 300),
    help="Longest wait, in seconds, for a query's min_position and for a free stream slot.",
)
@click.option(
    "--max-snapshots",
    default=2,
    show_default=True,
    type=click.IntRange(1, 100),
    help="GET /v1/snapshot streams at once (each flushes and checkpoints); more get 503.",
)
@click.option(
    "--max-exports",
    default=8,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="GET /v1/export streams at once; more get 503.",
)
@click.option(
    "--max-change-streams",
    default=8,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="GET /v1/changes streams at once (each holds a thread while it waits); more get 503.",
)
@click.option(
    "--change-stream-seconds",
    default=900.0,
    show_default=True,
    type=click.FloatRange(1, 86400),
    help="The longest a /v1/changes stream lasts; its client reconnects (EventSource does by "
    "itself). It is the bound on a client that never reads.",
)
@click.option(
    "--idle-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds an export or snapshot stream waits on a client that stopped reading "
    "before dropping it.",
)
@click.option(
    "--bootstrap-from",
    metavar="URL_OR_DIR",
    help="A peer's GET /v1/snapshot URL or a snapshot directory to start from when the "
    "store directory is empty or must be rebuilt. The URL is fetched with "
    "$GLOBALSTORE_PEER_TOKEN (never this server's own token); https:// unless the peer is on "
    "loopback or GLOBALSTORE_INSECURE_SNAPSHOT=1.",
)
@click.option(
    "--graceful-seconds",
    default=30,
    show_default=True,
    type=click.IntRange(0, 3600),
    help="On SIGTERM, how long in-flight requests may take before they are cut.",
)
@click.option(
    "--workers",
    default=0,
    show_default=True,
    type=click.IntRange(0, 64),
    help="Answer HTTP from this many worker processes reading the store this process "
    "writes (SharedStore); 0: one process does both. Under heavy reads, workers keep the "
    "store fresh: the follower no longer waits for the GIL behind the requests.",
)
@click.option(
    "--otel",
    is_flag=True,
    help="Also export the metrics, and traces of requests and of restore and snapshot "
    "phases, by OpenTelemetry (OTLP over HTTP, set by the standard OTEL_* variables; the "
    "otel extra). Not with --workers.",
)
def serve(
    target: StoreTarget,
    host: str,
    port: int,
    token_file: Path | None,
    allowed_hosts: tuple[str, ...],
    max_wait: float,
    max_snapshots: int,
    max_exports: int,
    max_change_streams: int,
    change_stream_seconds: float,
    idle_timeout: float,
    bootstrap_from: str | None,
    graceful_seconds: int,
    workers: int,
    otel: bool,
) -> None:
    """Serve the store at --path over HTTP while it restores and follows --topic.

    /readyz answers 503 until the restore is complete; queries meanwhile get 503 too.
    """
    try:
        from globalstore import server  # noqa: PLC0415 - the optional extra, only when serving
    except ImportError as exc:
        raise UserError(
            f"globalstore serve needs the serve extra: pip install 'globalstore[serve]' ({exc})"
        ) from exc
    try:
        token = server.load_token(token_file)
    except (OSError, ValueError) as exc:
        raise UserError(str(exc)) from exc

    check_exposure(host, allowed_hosts, has_token=token is not None)
    if otel:
        _setup_otel(workers)
    target.check_discards()
    # An operator watches a server's log: a restore's progress (every few seconds, with its
    # rate and ETA) shows there without -v.
    if not progress.log.isEnabledFor(logging.INFO):
        progress.log.setLevel(logging.INFO)
    served = server.ServedStore(
        lambda listener: target.build(listener, bootstrap_from), start_timeout=target.timeout
    )
    settings = server.ServerSettings(
        token=token,
        allowed_hosts=allowed_hosts or server.hosts_for(host),
        max_wait=max_wait,
        max_snapshots=max_snapshots,
        max_exports=max_exports,
        max_change_streams=max_change_streams,
        change_stream_seconds=change_stream_seconds,
        idle_timeout=idle_timeout,
        otel=otel,
    )
    config = target.config
    listening = _listen(server.listen, host, port)  # before the store starts
    if workers:
        from globalstore.server import workers as pool  # noqa: PLC0415 - only with --workers

        handover = pool.worker_handover(config, settings)
        click.echo(
            f"serving {config.topic} on http://{host}:{port} with {workers} workers", err=True
        )
        pool.run_workers(served, handover, workers, listening, graceful_seconds)
        return
    click.echo(f"serving {config.topic} on http://{host}:{port}", err=True)
    server.server(served, settings, host, port, graceful_seconds).run(sockets=[listening])


def _setup_otel(workers: int) -> None:
    """OpenTelemetry's SDK for this process, or one line saying why not."""
    if workers:
        raise UserError("--otel exports from one process: run it without --workers")
    try:
        from globalstore.server import otel  # noqa: PLC0415 - the otel extra, only when asked
    except ImportError as exc:
        raise UserError(
            f"--otel needs the otel extra: pip install 'globalstore[otel]' ({exc})"
        ) from exc
    otel.setup_from_environment()


def _listen(listen: Callable[[str, int], socket.socket], host: str, port: int) -> socket.socket:
    """The server's socket, or one line saying why there is none (exit status 2)."""
    try:
        return listen(host, port)
    except OSError as exc:
        taken = exc.errno == errno.EADDRINUSE
        what_to_do = (
            "stop the process that has it, or pick another --port"
            if taken
            else ("check --host: it must be an address of this machine")
        )
        why = exc.strerror or str(exc)
        raise UserError(f"cannot listen on {host}:{port}: {why}; {what_to_do}") from exc
