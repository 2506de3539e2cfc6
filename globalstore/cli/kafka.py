"""`globalstore kafka start|stop|status|logs`: the local broker, or a local cluster of
several nodes (--nodes), secured if asked (--security)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from globalstore.config import BOOTSTRAP_ENV
from globalstore.kafka.settings import parse_pairs
from globalstore.localkafka import (
    DEFAULT_HEAP,
    DEFAULT_KAFKA_VERSION,
    DEFAULT_NODE_HEAP,
    DEFAULT_PORT,
    ClusterShape,
    LocalKafka,
    Security,
    default_data_dir,
    recorded_shape,
)

__all__ = ["CommandFunction", "kafka", "logs", "start", "status", "stop"]

CommandFunction = TypeVar("CommandFunction", bound=Callable[..., Any])


def _broker_options(command: CommandFunction) -> CommandFunction:
    """--port and --data-dir, shared by every subcommand so they all find the same broker."""
    options = [
        click.option(
            "--port",
            type=click.IntRange(1, 65535),
            default=_default_port,
            show_default=f"{DEFAULT_PORT}, or the port of ${BOOTSTRAP_ENV}",
            help="Client port.",
        ),
        click.option(
            "--data-dir",
            type=click.Path(path_type=Path),
            default=default_data_dir,
            show_default="~/.local/share/globalstore/kafka",
            help="Topics, KRaft metadata and logs; survives restarts.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _default_port() -> int:
    """The port of GLOBALSTORE_BOOTSTRAP when it names a local address, so `kafka start` and
    the store and pipeline commands agree on one broker with one variable."""
    host, _, port = os.environ.get(BOOTSTRAP_ENV, "").split(",")[0].rpartition(":")
    if host in ("127.0.0.1", "localhost") and port.isdigit():
        return int(port)
    return DEFAULT_PORT


def _broker(
    port: int, data_dir: Path, nodes: int | None = None, security: str | None = None, **more: Any
) -> LocalKafka:
    """The cluster in `data_dir`: the shape it was formatted for unless told otherwise, so
    `stop`, `status` and `logs` (and a plain `start` again) find the nodes it has."""
    recorded = recorded_shape(data_dir) or ClusterShape()
    return LocalKafka(
        port=port,
        data_dir=data_dir,
        nodes=nodes or recorded.nodes,
        security=security or recorded.security,
        **more,
    )


@click.group()
def kafka() -> None:
    """Run a local Apache Kafka broker (KRaft), or a cluster of several, for development
    and tests."""


@kafka.command()
@_broker_options
@click.option("--nodes", type=click.IntRange(1, 9), default=None,
              help="Combined broker+controller nodes, one JVM each.  [default: 1, or what the "
                   "data dir was formatted for]")  # fmt: skip
@click.option("--security", type=click.Choice([s.value for s in Security]), default=None,
              help="How clients connect: plaintext, SASL_SSL with SCRAM users, or mutual TLS."
                   "  [default: plaintext, or what the data dir was formatted for]")  # fmt: skip
@click.option("--client-config-file", type=click.Path(path_type=Path), default=None,
              help="Where a secured cluster's client settings go.  "
                   "[default: DATA_DIR/client.properties]")  # fmt: skip
@click.option("--version", "kafka_version", default=DEFAULT_KAFKA_VERSION, show_default=True)
@click.option("--heap", default=None, help=f"JVM heap per node, e.g. 512m.  [default: "
              f"{DEFAULT_HEAP}, {DEFAULT_NODE_HEAP} per node of a cluster]")  # fmt: skip
@click.option("--fresh", is_flag=True, help="Wipe the data directory first.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for ready.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Extra broker setting (repeatable).")  # fmt: skip
def start(
    port: int, data_dir: Path, nodes: int | None, security: str | None,
    client_config_file: Path | None, kafka_version: str, heap: str | None, fresh: bool,
    timeout: float, overrides: tuple[str, ...],
) -> None:  # fmt: skip
    """Start the broker or cluster (idempotent) and print its bootstrap address."""
    extra = parse_pairs(overrides, "--set")
    broker = _broker(port, data_dir, nodes, security, version=kafka_version, heap=heap,
                     extra_config=extra)  # fmt: skip
    was_running = broker.status().running
    began = time.monotonic()
    bootstrap = broker.start(fresh=fresh, timeout=timeout)
    note = (
        "already running"
        if was_running and not fresh
        else f"ready in {time.monotonic() - began:.1f}s"
    )
    click.echo(f"Kafka {broker.status().version} {note}", err=True)
    if broker.security is not Security.PLAINTEXT:
        written = broker.write_client_properties(
            client_config_file or data_dir / "client.properties"
        )
        # The file holds the app user's secret; only where it is gets printed.
        click.echo(f"client settings: {written} (use --kafka-config-file {written})", err=True)
    click.echo(bootstrap)


@kafka.command()
@_broker_options
@click.option("--timeout", default=30.0, show_default=True, help="Seconds before SIGKILL.")
def stop(port: int, data_dir: Path, timeout: float) -> None:
    """Stop the broker, or every node of the cluster: SIGTERM, then SIGKILL after the
    timeout."""
    stopped = _broker(port, data_dir).stop(timeout=timeout)
    click.echo("stopped" if stopped else "not running")


@kafka.command()
@_broker_options
def status(port: int, data_dir: Path) -> None:
    """Tell whether the broker runs, with its pid, address, data dir and version."""
    current = _broker(port, data_dir).status()
    click.echo(current.describe())
    if not current.running:
        raise SystemExit(3)


@kafka.command()
@_broker_options
@click.option("-n", "--lines", default=40, show_default=True)
@click.option("--node", default=1, show_default=True, help="Which node's log, in a cluster.")
def logs(port: int, data_dir: Path, lines: int, node: int) -> None:
    """Print the last lines of the broker's log."""
    click.echo(_broker(port, data_dir).log_tail(lines, node_id=node))
